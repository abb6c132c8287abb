"""`python -m benchmarks.learner_matrix CONFIG`: the learner alone on its device, per precision x
capture x batch shape, from batches already on the device: the update alone, and the whole epoch
loop cycling them (no Ray, no collectors, nothing drawn).

It answers "how fast can this learner go on this machine" and "which precision and which capture
setting win", so the configs can name the fastest and `raypex bench` has a ceiling to hold the
Ray-fed learner against. One process, one variant at a time, each warmed up (and captured) before
its clock starts. Example, on a GPU box:

    python -m benchmarks.learner_matrix configs/pong.yaml --shapes 512x4,128x4 --json learner.json
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import time
from pathlib import Path

from raypex.actors.envs import UnsupportedEnv, inspect_env
from raypex.cluster.bench.report import write_json_payload
from raypex.cluster.config.loading import ConfigError, load_config
from raypex.cluster.config.shipped import config_path
from raypex.cluster.plan.settings import learner_settings


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'512x4,128x4' -> [(512, 4), (128, 4)] (micro-batch x accumulation steps)."""
    shapes = []
    for part in text.split(","):
        micro, _, steps = part.partition("x")
        if not (micro.isdigit() and steps.isdigit()) or int(micro) < 1 or int(steps) < 1:
            raise ValueError(f"--shapes: '{part}' is not MICROxSTEPS, e.g. 512x4")
        shapes.append((int(micro), int(steps)))
    return shapes


def replay(settings, device, spec):
    """A one-shard replay of one update's worth of transitions per micro-batch slot, on `device`
    where a run would keep it (its random contents are never read as data, only gathered)."""
    from raypex.cluster.plan.topology import ReplayPlan
    from raypex.replay.priorities import BetaSchedule, PrioritySettings
    from raypex.replay.rate_limit import SamplesPerInsertLimiter
    from raypex.replay.shard import StorageSpec

    storage = StorageSpec(4 * settings.micro_batch * settings.accumulation_steps, spec.obs_shape, spec.obs_dtype,
                          spec.frame_stack, 8, spec.action_dim)
    prioritized = settings.prioritized
    return ReplayPlan(1, storage, SamplesPerInsertLimiter(0.0, 1, 1), 0, PrioritySettings() if prioritized else None,
                      BetaSchedule(0.4, 1000, 1) if prioritized else None).build(device)[0]


def measure_variant(settings, device, seconds: float, host_batches: int, spec) -> dict:
    """One learner built from `settings`: warm-up/capture seconds, then samples/s and GPU busy
    on device-resident batches and from host memory."""
    import numpy as np
    import torch

    from raypex.cluster.bench.throughput import from_memory, on_device
    from raypex.learner.learner import Learner

    learner = Learner(settings, device, replay(settings, device, spec), lambda weights: None)
    start = time.perf_counter()
    learner.warmup()
    row = {"warmup_s": time.perf_counter() - start, "captured": learner.captured}
    row["device_samples_per_s"], row["device_gpu_busy"] = on_device(learner, seconds)
    # The epoch loop measures whole epochs: at most a quarter of the clock each, so a slow variant
    # (bf16 emulated on a CPU without bf16 units: 1.5 updates/s) is not held for minutes.
    updates_per_s = row["device_samples_per_s"] / (settings.micro_batch * settings.accumulation_steps)
    epoch = max(1, min(settings.updates_per_epoch, int(updates_per_s * seconds / 4)))
    learner.s = dataclasses.replace(learner.s, updates_per_epoch=epoch)
    batches = [learner.example_batch(np.random.default_rng(seed)) for seed in range(host_batches)]
    row["memory_samples_per_s"], row["memory_gpu_busy"] = from_memory(learner, batches, seconds)
    del learner, batches
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def copy_bandwidth(megabytes: int = 256) -> dict:
    """GB/s of the feed's host work on this machine: numpy -> pinned memory (one torch thread,
    then torch's default threads), and pinned -> device."""
    import numpy as np
    import torch

    source = np.random.default_rng(0).integers(0, 256, megabytes << 20, dtype=np.uint8)
    pinned = torch.empty(len(source), dtype=torch.uint8, pin_memory=torch.cuda.is_available())

    def rate(copy) -> float:
        copy()
        start = time.perf_counter()
        for _ in range(5):
            copy()
        return 5 * len(source) / (time.perf_counter() - start) / 1e9

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    result = {"host_to_pinned_1_thread": rate(lambda: pinned.copy_(torch.from_numpy(source)))}
    torch.set_num_threads(threads)
    result[f"host_to_pinned_{threads}_threads"] = rate(lambda: pinned.copy_(torch.from_numpy(source)))
    if torch.cuda.is_available():
        device = torch.empty_like(pinned, device="cuda")

        def to_device():
            device.copy_(pinned, non_blocking=True)
            torch.cuda.synchronize()

        result["pinned_to_device"] = rate(to_device)
    return result


def default_precisions(device) -> list[str]:
    """The precisions the matrix measures unless told: fp16 on CUDA only, bf16 on CUDA or a CPU
    with bf16 units (said on stderr when left out)."""
    if device.type == "cuda":
        return ["fp32", "bf16", "fp16"]
    from raypex.learner.cpu_features import cpu_has_bf16_units

    if cpu_has_bf16_units():
        return ["fp32", "bf16"]
    print("bf16 left out: this CPU has no bf16 units (--precisions fp32,bf16 times it anyway)", file=sys.stderr)
    return ["fp32"]


def main(argv: list[str] | None = None) -> int:
    """Measure every requested variant; print a table; optionally write JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.learner_matrix", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=config_path, help="a YAML file or a shipped config's name")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when there is one)")
    parser.add_argument("--shapes", default=None, help="MICROxSTEPS,... (default: the config's)")
    parser.add_argument("--precisions", default=None,
                        help="fp32, bf16, fp16, comma-separated (default: those the device runs, without bf16 on "
                             "a CPU that has no bf16 units: emulated there, 9x slower than fp32)")
    parser.add_argument("--graphs", default="on,off", help="cuda_graphs settings to measure")
    parser.add_argument("--channels-last", default="on", help="on, off or on,off (CNNs on CUDA)")
    parser.add_argument("--compile", default="off", help="on, off or on,off")
    parser.add_argument("--seconds", type=float, default=3.0, help="clock per measurement")
    parser.add_argument("--host-batches", type=int, default=16, help="distinct batches cycled by the epoch loop")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--copy", action="store_true", help="also measure host copy bandwidths (GB/s)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_intermixed_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
        shapes = parse_shapes(args.shapes) if args.shapes else [
            (config.learner.micro_batch, config.learner.accumulation_steps)]
    except (ConfigError, UnsupportedEnv, ValueError) as err:
        print(f"bench_learner: {err}", file=sys.stderr)
        return 2
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    base = learner_settings(config, spec)
    precisions = args.precisions.split(",") if args.precisions else default_precisions(device)
    if args.copy:
        print("copy GB/s: " + json.dumps({k: round(v, 1) for k, v in copy_bandwidth().items()}), flush=True)
    rows = []
    for micro, steps in shapes:
        for precision in precisions:
            if precision == "fp16" and device.type != "cuda":
                continue
            for graphs in args.graphs.split(","):
                if graphs == "on" and device.type != "cuda":
                    continue
                for channels_last in args.channels_last.split(","):
                    for compiled in args.compile.split(","):
                        settings = dataclasses.replace(
                            base, micro_batch=micro, accumulation_steps=steps, precision=precision,
                            cuda_graphs=graphs, channels_last=channels_last == "on", compile=compiled == "on",
                            updates_per_epoch=max(5, min(50, 2_000_000 // (micro * steps * 100))))
                        variant = {"micro": micro, "steps": steps, "precision": precision, "graphs": graphs,
                                   "channels_last": channels_last, "compile": compiled}
                        print(f"measuring {variant}", file=sys.stderr, flush=True)
                        try:
                            row = {**variant, **measure_variant(settings, device, args.seconds, args.host_batches, spec)}
                        except Exception as err:  # noqa: BLE001 - a variant that fails is a row that says why
                            row = {**variant, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
                        print(json.dumps(row), flush=True)
                        rows.append(row)
    print(format_rows(rows))
    if args.json is not None:
        write_json_payload({"device": str(device), "gpu": torch.cuda.get_device_name() if device.type == "cuda"
                            else None, "torch": torch.__version__, "rows": rows}, args.json)
    return 0 if any("error" not in row for row in rows) else 1  # nothing measured is a failed run


def format_rows(rows: list[dict]) -> str:
    """The table: one line per variant, samples/s in thousands."""
    lines = ["shape   prec  graph  cl   comp  warmup_s  device_k/s  busy  memory_k/s  busy  memory/device"]
    for r in rows:
        head = (f"{r['micro']}x{r['steps']:<4} {r['precision']:<5} {r['graphs']:<6} {r['channels_last']:<4} "
                f"{r['compile']:<5}")
        if "error" in r:
            lines.append(f"{head} {r['error']}")
            continue
        busy = [f"{b:.2f}" if b is not None else "-" for b in (r["device_gpu_busy"], r["memory_gpu_busy"])]
        lines.append(f"{head} {r['warmup_s']:8.1f}  {r['device_samples_per_s'] / 1e3:10.1f}  {busy[0]:>4}  "
                     f"{r['memory_samples_per_s'] / 1e3:10.1f}  {busy[1]:>4}  "
                     f"{r['memory_samples_per_s'] / r['device_samples_per_s']:13.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
