"""`raypex bench --stage learner`'s variants: which (precision, cuda_graphs) pairs run on a device,
the --variants option's parsing, and the rows each measured variant gives."""

from __future__ import annotations

from raypex.cluster.bench.report import BenchRow
from raypex.cluster.config.arguments import UsageError


def parse_variants(text: str) -> list[tuple[str, str]]:
    """'fp16:on,bf16:off' -> [('fp16', 'on'), ('bf16', 'off')] (UsageError naming a bad item)."""
    pairs = []
    for item in text.split(","):
        precision, colon, graphs = item.partition(":")
        if not colon:
            raise UsageError(f"--variants: '{item}' is not PRECISION:GRAPHS, e.g. fp16:on")
        if precision not in ("fp32", "bf16", "fp16") or graphs not in ("on", "off"):
            raise UsageError(f"--variants: '{item}' is not PRECISION:GRAPHS with PRECISION fp32, bf16 or fp16 "
                             "and GRAPHS on or off")
        pairs.append((precision, graphs))
    return pairs


def runnable_variants(device: str) -> list[tuple[str, str]]:
    """Every (precision, cuda_graphs) pair that runs on `device`."""
    if device == "cuda":
        return [(precision, graphs) for precision in ("fp32", "bf16", "fp16") for graphs in ("on", "off")]
    return [("fp32", "off"), ("bf16", "off")]


def learner_variants(device: str, chosen: list[tuple[str, str]] | None = None,
                     cpu_bf16_units: bool = True) -> list[tuple[str, str]]:
    """(precision, cuda_graphs) pairs `--stage learner` measures on `device`: the `chosen` ones
    (each must run on `device`), or all that run there, except bf16 on a CPU without bf16 units
    (emulated, 9x slower than fp32 on the AVX2-only EPYC: a learner's `auto` never picks it there,
    and timing it cost the bench 10 s)."""
    allowed = runnable_variants(device)
    if chosen:
        for pair in chosen:
            if pair not in allowed:
                raise UsageError(f"--variants: '{':'.join(pair)}' does not run on {device}; there: "
                                 f"{', '.join(':'.join(p) for p in allowed)}")
        return chosen
    if device != "cuda" and not cpu_bf16_units:
        return [pair for pair in allowed if pair[0] != "bf16"]
    return allowed


def learner_rows(results: list[dict]) -> list[BenchRow]:
    """Per variant: fed samples/s against from-memory samples/s, and the GPU's busy fraction."""
    rows = []
    for r in results:
        name = f"learner_{r['precision']}_{'graph' if r['cuda_graphs'] == 'on' else 'eager'}"
        fed, memory = r["fed"], r["memory"]
        rows.append(BenchRow.against(name, fed["samples_per_s"], "samples/s", memory["samples_per_s"], ">= 0.8"))
        if fed["gpu_busy"] is not None:
            rows.append(BenchRow.against(f"{name}_gpu_busy", fed["gpu_busy"], "fraction", 1.0, ">= 0.9"))
        rows.append(BenchRow(f"{name}_wait_fraction", fed["wait_fraction"], "fraction"))
    return rows
