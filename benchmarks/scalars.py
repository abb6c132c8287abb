"""Finished runs' TensorBoard scalars side by side: each tag's mean over bins of env steps, a row per
run, to compare two seeds' losses and episodes without TensorBoard's pages.

    python -m benchmarks.scalars RUN [RUN ...] [--tags TAG ...] [--bin 10000] [--to ENV_STEPS]

A bin with no value of a tag prints `-`. Why: when one seed of a config learns and another does
not, the first question is whether its critic went wrong (TD loss, Q values) or its policy found no
way forward (episode lengths and returns), and that is in the files the runs already wrote.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

DEFAULT_TAGS = ("losses/td_loss", "losses/q_values", "losses/actor_loss", "charts/episodic_length",
                "charts/episodic_return", "eval/return_mean")


def binned_means(points: list[tuple[float, int, float]], width: int, end: int) -> list[float]:
    """The mean of the values whose step lies in each bin [k * width, (k + 1) * width) below `end`;
    nan for a bin with none (`points` as read_scalars gives them)."""
    bins: list[list[float]] = [[] for _ in range(math.ceil(end / width))]
    for _, step, value in points:
        if 0 <= step < end:
            bins[step // width].append(value)
    return [sum(b) / len(b) if b else math.nan for b in bins]


def read_scalars(run_dir: Path, tags: list[str]) -> dict[str, list[tuple[float, int, float]]]:
    """(wall time, env steps, value) of each of `tags` the run logged, in wall-time order; a tag it
    lacks maps to []."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not (run_dir / "tensorboard").is_dir():
        raise SystemExit(f"{run_dir}: no tensorboard/ there (give a run directory)")
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    logged = set(events.Tags()["scalars"])
    return {tag: sorted((e.wall_time, e.step, e.value) for e in events.Scalars(tag)) if tag in logged else []
            for tag in tags}


def table(runs: dict[str, dict[str, list[tuple[float, int, float]]]], tags: list[str], width: int, end: int) -> str:
    """Per tag: a line of bin starts, then a row per run of its means."""
    starts = range(0, end, width)
    name_width = max(len(name) for name in runs)
    lines = []
    for tag in tags:
        lines.append(f"{tag}\n{'':{name_width}}  " + " ".join(f"{s // 1000:>8}k" for s in starts))
        for name, scalars in runs.items():
            means = binned_means(scalars[tag], width, end)
            lines.append(f"{name:{name_width}}  " + " ".join(f"{'-' if math.isnan(m) else f'{m:.2f}':>9}" for m in means))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scalars", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN")
    parser.add_argument("--tags", nargs="+", default=list(DEFAULT_TAGS))
    parser.add_argument("--bin", type=int, default=10000, help="env steps per bin")
    parser.add_argument("--to", type=int, default=None, help="the last bin's end (default: the runs' last step)")
    args = parser.parse_args(argv)
    if args.bin <= 0:
        raise SystemExit(f"--bin {args.bin}: give a positive number of env steps")
    runs = {str(run): read_scalars(run, args.tags) for run in args.runs}
    end = args.to or max((step for r in runs.values() for points in r.values() for _, step, _ in points), default=0) + 1
    print(table(runs, args.tags, args.bin, end))
    return 0


if __name__ == "__main__":
    sys.exit(main())
