"""Evaluation curves of finished runs, read from their TensorBoard files: eval return against env
steps and against wall time, one line per run, drawn to a PNG for the results page.

    python -m benchmarks.curves OUT.png LABEL=RUN_DIR [LABEL=RUN_DIR ...] [--title TEXT]

Runs given the same LABEL are one line each in the same colour. Needs matplotlib (not one of
raypex's dependencies: install it where you draw).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def eval_curve(run_dir: Path) -> tuple[list[int], list[float], list[float]]:
    """(env steps, wall seconds since the run's first event, mean eval return) of every evaluation."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    if "eval/return_mean" not in events.Tags()["scalars"]:
        raise SystemExit(f"{run_dir}: no eval/return_mean in its TensorBoard files")
    scalars = events.Scalars("eval/return_mean")
    start = min(s.wall_time for tag in events.Tags()["scalars"] for s in events.Scalars(tag))
    return [s.step for s in scalars], [s.wall_time - start for s in scalars], [s.value for s in scalars]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.curves", description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("runs", nargs="+", metavar="LABEL=RUN_DIR")
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
            parser.error(f"{item}: give LABEL=RUN_DIR")
        steps, seconds, returns = eval_curve(Path(path))
        colour = colours.setdefault(label, f"C{len(colours)}")
        first = label not in {line.get_label() for line in by_steps.get_lines()}
        by_steps.plot(steps, returns, color=colour, label=label if first else "_", linewidth=1.2)
        by_time.plot(seconds, returns, color=colour, linewidth=1.2)
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
