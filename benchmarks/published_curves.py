"""A published per-sample curve, the mean over its seeds, from a paper's own result files: the
long-format CSVs (env_name, seed, metric, env_step, value) that SimbaV2's repository publishes for
itself and the baselines it ran (github.com/dojeon-ai/SimbaV2, results/baseline/: crossq.csv,
simbaV2_utd2.csv, mrq.csv, bro_utd2.csv, ...).

    python -m benchmarks.published_curves SOURCE.csv --env HalfCheetah-v4 --max-steps 300000 --out CURVE.csv

CURVE.csv has the columns env_steps, eval_return_mean, seeds: what benchmarks/curves.py draws as a
published curve beside raypex's runs. The source files are the paper authors' data, read from a
copy the user fetched; nothing here downloads.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks.curves import read_rows

RETURN_METRIC = "avg_return"


def mean_curve(rows: list[dict[str, str]], env: str, max_steps: int) -> list[tuple[int, float, int]]:
    """(env steps, mean return over the seeds measured there, how many seeds) at each env step
    the source reports for `env`, up to `max_steps`."""
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row["env_name"] == env and row["metric"] == RETURN_METRIC:
            step = int(float(row["env_step"]))
            if step <= max_steps:
                by_step[step][row["seed"]] = float(row["value"])
    return [(step, sum(seeds.values()) / len(seeds), len(seeds)) for step, seeds in sorted(by_step.items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.published_curves", description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a result CSV with env_name, seed, metric, env_step, value")
    parser.add_argument("--env", required=True, help="the env's name as the source spells it (HalfCheetah-v4)")
    parser.add_argument("--max-steps", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    rows = read_rows(args.source, {"env_name", "seed", "metric", "env_step", "value"},
                     "env_name, seed, metric, env_step, value")
    curve = mean_curve(rows, args.env, args.max_steps)
    if not curve:
        envs = sorted({row["env_name"] for row in rows})
        raise SystemExit(f"{args.source}: no {RETURN_METRIC} of {args.env}; it holds {', '.join(envs)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["env_steps", "eval_return_mean", "seeds"])
        writer.writerows((step, round(value, 1), seeds) for step, value, seeds in curve)
    print(f"wrote {args.out}: {len(curve)} points of {args.env} up to {curve[-1][0]} env steps, "
          f"{min(c[2] for c in curve)}-{max(c[2] for c in curve)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
