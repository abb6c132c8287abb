"""Evaluation curves of finished runs, read from their TensorBoard files: eval return against env
steps and against wall time, one line per run, drawn to a PNG for the results page.

    python -m benchmarks.curves OUT.png LABEL=RUN [LABEL=RUN ...] [--published LABEL=STEPS:RETURN ...] [--title TEXT]

A RUN is a run directory, or a CSV of evaluations (env_steps, seconds, eval_return_mean: what
benchmarks/sb3_reference.py writes) measured by another library. A CSV without `seconds` is a
published per-sample curve (what benchmarks/published_curves.py writes from a paper's result
files), dashed and on the env-steps panel only: a paper's wall time is another machine's. Runs
given the same LABEL are one line each in the same colour. `--published` marks a single figure read
from a paper at its env steps. Needs matplotlib (not one of raypex's dependencies: install it where
you draw).
"""

from __future__ import annotations

import argparse
import csv
import sys
from itertools import pairwise
from pathlib import Path


def eval_curve(run_dir: Path) -> tuple[list[int], list[float], list[float]]:
    """(env steps, the run's own wall seconds, mean eval return) of every evaluation. Each start of
    the run (the first, and each `--resume`) logs its config before Ray starts, within about a
    second of the command's start, so the seconds count nearly all a user waits, as another
    library's from its script's start; the time between a run's end and its resume is left out."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0}).Reload()
    if "eval/return_mean" not in events.Tags()["scalars"]:
        raise SystemExit(f"{run_dir}: no eval/return_mean in its TensorBoard files")
    scalars = events.Scalars("eval/return_mean")
    logged = sorted(e.wall_time for tag in events.Tags()["scalars"] for e in events.Scalars(tag))
    starts = sorted({e.wall_time for e in events.Tensors("config")}) if "config" in events.Tags()["tensors"] else []
    spans = run_spans(starts or logged[:1], logged)
    return [s.step for s in scalars], [own_seconds(s.wall_time, spans) for s in scalars], [s.value for s in scalars]


def run_spans(starts: list[float], logged: list[float]) -> list[tuple[float, float]]:
    """(wall time of each start of the run, the run's own seconds before it): each earlier start
    counts up to the last event it logged before the next start, so the time between a run's end
    and its resume is left out."""
    spans, before = [], 0.0
    for start, following in pairwise([*starts, float("inf")]):
        spans.append((start, before))
        before += max(t for t in [*logged, start] if start <= t < following) - start
    return spans


def own_seconds(wall_time: float, spans: list[tuple[float, float]]) -> float:
    """Seconds of the run's own time at `wall_time` (`spans` from run_spans)."""
    start, before = next((span for span in reversed(spans) if span[0] <= wall_time), spans[0])
    return before + wall_time - start


def read_rows(path: Path, columns: set[str], wanted: str) -> list[dict[str, str]]:
    """A CSV's rows, refused in one line unless its header has `columns` (`wanted` says which)."""
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    if not rows or not columns <= set(rows[0]):
        raise SystemExit(f"{path}: give a CSV with the columns {wanted}")
    return rows


def csv_curve(path: Path) -> tuple[list[int], list[float] | None, list[float]]:
    """The same three columns from a CSV of another library's evaluations; seconds None for a
    published curve, which has none."""
    rows = read_rows(path, {"env_steps", "eval_return_mean"},
                     "env_steps, eval_return_mean (and seconds, for a measured run)")
    seconds = [float(r["seconds"]) for r in rows] if "seconds" in rows[0] else None
    return [int(float(r["env_steps"])) for r in rows], seconds, [float(r["eval_return_mean"]) for r in rows]


def published_point(item: str) -> tuple[str, int, float]:
    """LABEL=STEPS:RETURN as (label, env steps, return)."""
    label, _, point = item.partition("=")
    steps, _, value = point.partition(":")
    try:
        return label, int(float(steps)), float(value)
    except ValueError:
        raise SystemExit(f"--published {item}: give LABEL=STEPS:RETURN, such as CrossQ=100000:8112") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.curves", description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("runs", nargs="+", metavar="LABEL=RUN")
    parser.add_argument("--published", nargs="*", default=[], metavar="LABEL=STEPS:RETURN")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_steps, by_time) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    colours: dict[str, str] = {}
    for item in args.runs:
        label, _, path = item.partition("=")
        if not path:
            parser.error(f"{item}: give LABEL=RUN (a run directory or a CSV of evaluations)")
        steps, seconds, returns = csv_curve(Path(path)) if path.endswith(".csv") else eval_curve(Path(path))
        colour = colours.setdefault(label, f"C{len(colours)}")
        shown = label if seconds is not None else f"{label} (published)"
        first = shown not in {line.get_label() for line in by_steps.get_lines()}
        style = "-" if seconds is not None else "--"
        by_steps.plot(steps, returns, style, color=colour, label=shown if first else "_", linewidth=1.2)
        if seconds is not None:
            by_time.plot(seconds, returns, color=colour, linewidth=1.2)
    for marker, item in zip("osD^v", args.published):
        label, steps, value = published_point(item)
        by_steps.plot([steps], [value], marker=marker, color="black", linestyle="none", label=f"{label} (published)")
    by_steps.set_xlabel("env steps")
    by_time.set_xlabel("wall seconds")
    by_steps.set_ylabel("eval return (mean)")
    by_steps.legend()
    for axes in (by_steps, by_time):
        axes.grid(alpha=0.3)
    figure.suptitle(args.title)
    figure.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.output, dpi=100)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
