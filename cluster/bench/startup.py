"""`raypex bench --stage startup`: where the seconds from `raypex train` to training go.

Each run is the command itself, as a user types it, in a fresh process (its imports, a fresh
local Ray cluster, or with `--address` the cluster a user keeps up between runs), stopped soon
after the learner's first update; summary.json's `startup_s` says when each moment of the start
came (cluster/driver/startup.py). The rows are the medians
over the runs; the two the issue set bars for are held against them: the first env step within
2 s of the command's start, the first update within 3 s.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from raypex.cluster.bench.report import BenchRow
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.startup import PHASES

BARS_S = {"first_env_step": 2.0, "first_update": 3.0}


def train_command() -> list[str]:
    """`raypex` as installed beside this interpreter, else the same entry point through -m."""
    script = Path(sys.executable).parent / "raypex"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "raypex"]


def startup_argv(config_args: list[str], run_dir: Path, min_size: int, address: str | None) -> list[str]:
    """One measured run: `raypex train CONFIG_ARGS`, stopped at twice replay.min_size env steps,
    joining `address` when given (else starting its own local cluster)."""
    joining = ["--address", address] if address is not None else []
    return [*train_command(), "train", *config_args, *joining, "--run-dir", str(run_dir),
            f"stop.env_steps={2 * min_size}", "stop.eval_return=null"]


def startup_rows(config_args: list[str], min_size: int, runs: int, progress: ProgressLine,
                 address: str | None = None) -> tuple[list[BenchRow], dict]:
    """Run `raypex train CONFIG_ARGS` `runs` times (startup_argv); a row per start-up moment
    (median seconds since the command started)."""
    per_run: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="raypex-startup-") as scratch:
        for i in range(runs):
            run_dir = Path(scratch) / f"run{i}"
            argv = startup_argv(config_args, run_dir, min_size, address)
            progress.message(f"bench: start-up, run {i + 1} of {runs}: {' '.join(argv[1:])}")
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"`{' '.join(argv)}` exited {done.returncode}: {done.stderr.strip()[-2000:]}")
            per_run.append(json.loads((run_dir / "summary.json").read_text())["startup_s"])
    rows = []
    for phase in PHASES:
        seen = [run[phase] for run in per_run if phase in run]
        if not seen:
            continue
        median = statistics.median(seen)
        if phase in BARS_S:
            rows.append(BenchRow.against(f"startup_{phase}", median, "s", BARS_S[phase], "<= 1.0"))
        else:
            rows.append(BenchRow(f"startup_{phase}", median, "s"))
    return rows, {"startup_s_per_run": per_run}
