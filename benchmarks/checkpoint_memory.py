"""What a replay checkpoint costs the driver: `raypex train` of configs/pong.yaml scaled to a small
box, its replay filled to `--transitions`, checkpointed with its replay; the driver process's peak
resident memory (VmHWM, polled from /proc), and the run's own `checkpoint_s_max` and
`replay_checkpoint_pause_s_max` from summary.json.

    python -m benchmarks.checkpoint_memory --transitions 50000
    python -m benchmarks.checkpoint_memory --transitions 200000

Each run fills both shards (the learner trains little: replay.samples_per_insert 0.05) and ends at
`--transitions` plus 10,000 env steps with a final checkpoint; one more is written on the way,
after the fill. Where the driver is never on the data's path, its peak does not grow with
`--transitions`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory so far, in MB (None once it has exited)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def scaled_pong(run_dir: Path, transitions: int) -> list[str]:
    per_shard = transitions // 2
    return ["raypex", "train", "configs/pong.yaml", "--run-dir", str(run_dir), "collectors.num=2",
            "collectors.num_cpus=0.5", "learner.num_cpus=1", "env.num_envs=8", f"replay.capacity={per_shard}",
            f"replay.min_size={int(transitions * 0.9)}", "replay.samples_per_insert=0.05", "replay.error_buffer=20000",
            "learner.micro_batch=32", "learner.accumulation_steps=1", "learner.updates_per_epoch=10",
            f"stop.env_steps={transitions + 10_000}", "stop.eval_return=null", "eval.every_env_steps=100000000",
            "eval.episodes=1", "eval.video_every=0", "checkpoint.replay=true", "checkpoint.keep=1",
            "checkpoint.every_epochs=20"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=200_000, help="replay capacity over both shards")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / "run"
        start = time.monotonic()
        proc = subprocess.Popen(scaled_pong(run_dir, args.transitions), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, peak_rss_mb(proc.pid) or 0.0)
            time.sleep(0.2)  # a poll's pace: VmHWM keeps the peak between polls
        err = proc.stderr.read()
        if proc.returncode != 0:
            sys.exit(f"raypex train exited {proc.returncode}:\n{err[-3000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
        replay_files = sorted((run_dir / "checkpoints").glob("ckpt-*-shard-*"))
        print(json.dumps({
            "transitions": args.transitions, "env_steps": summary["env_steps"],
            "replay_sizes": summary.get("replay_size_per_shard"),
            "replay_file_mb": round(sum(p.stat().st_size for p in replay_files) / 2**20, 1),
            "driver_peak_rss_mb": round(peak, 1), "checkpoint_s_max": summary.get("checkpoint_s_max"),
            "replay_checkpoint_pause_s_max": summary.get("replay_checkpoint_pause_s_max"),
            "wall_s": round(time.monotonic() - start, 1)}))


if __name__ == "__main__":
    main()
