"""`python -m benchmarks.idle_ray --minutes M [--json PATH]`: the soak's control, Ray alone.

`raypex bench --soak` judges every process of a run's local cluster, Ray's own included. This
starts the same local cluster the same way (cluster/ray_runtime/wiring.py `connect`: the same settings,
malloc arenas and reaper token), places four actors that do nothing (a run's collectors, learner
and evaluator), and samples the same processes' resident memory on the soak's clock for M minutes.
Rows are the soak's: the median of the first samples after SETTLE_S against the median of the last.
What the raylet or gcs_server grows by here, with no work at all, is Ray's own and not a run's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import ray

from raypex.cluster.bench.report import BenchRow, format_table, write_json
from raypex.cluster.bench.soak import (
    SAMPLES_PER_END,
    SAMPLES_PER_RUN,
    cluster_processes,
    growth_rows,
    label_new_processes,
    rss_bytes,
)
from raypex.cluster.ray_runtime import wiring
from raypex.cluster.ray_runtime.reaper import TOKEN_VARIABLE

SETTLE_S = 5.0  # a soak's reference is taken when replay is full: 4-6 s into a CartPole run
MIN_MINUTES = 0.2  # samples are at least 1 s apart: SETTLE_S plus two ends of SAMPLES_PER_END each
IDLE_ACTORS = 4


@ray.remote(num_cpus=0)
class IdleActor:
    """An actor that only answers that it is there."""

    def ready(self) -> bool:
        """True, once the actor's process is up."""
        return True


def sample_idle_cluster(minutes: float) -> tuple[list[BenchRow], list[dict]]:
    """(the soak's rows for every process of an idle local cluster, the samples)."""
    wiring.connect(None)
    try:
        actors = [IdleActor.remote() for _ in range(IDLE_ACTORS)]
        ray.get([actor.ready.remote() for actor in actors])
        token, names, samples = os.environ.get(TOKEN_VARIABLE, ""), {}, []
        interval = min(15.0, max(1.0, minutes * 60.0 / SAMPLES_PER_RUN))
        start = time.time()
        while True:
            elapsed = time.time() - start
            label_new_processes(names, cluster_processes(token))
            samples.append({"t": elapsed, "rss": {name: value for pid, name in names.items()
                                                  if (value := rss_bytes(pid)) is not None}})
            if elapsed >= minutes * 60.0:
                break
            time.sleep(min(interval, max(0.0, minutes * 60.0 - elapsed)))  # the sampling clock
    finally:
        wiring.shutdown()
    return idle_growth_rows(samples), samples


def idle_growth_rows(samples: list[dict]) -> list[BenchRow]:
    """The soak's rows for samples [{"t": s, "rss": {process: bytes}}]: the median of the first
    SAMPLES_PER_END samples from SETTLE_S on against the median of the last ones, per process
    present at both ends (SystemExit when there are too few samples to tell)."""
    after = [s for s in samples if s["t"] >= SETTLE_S]
    if len(after) < 2 * SAMPLES_PER_END:
        raise SystemExit(f"idle_ray: too few samples after {SETTLE_S:g}s ({len(after)}); run longer")
    return growth_rows("idle_rss_", [s["rss"] for s in after[:SAMPLES_PER_END]],
                       [s["rss"] for s in after[-SAMPLES_PER_END:]])


def main(argv: list[str] | None = None) -> int:
    """Run the control and print the soak's table for it."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.idle_ray", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True, help="how long to watch the idle cluster")
    parser.add_argument("--json", type=Path, help="write the rows and samples here (raypex bench's JSON layout)")
    args = parser.parse_args(argv)
    if not args.minutes >= MIN_MINUTES:
        print(f"idle_ray: --minutes must be at least {MIN_MINUTES:g} (a sample a second, judged from "
              f"{SETTLE_S:g}s on), got {args.minutes:g}", file=sys.stderr)
        return 2
    rows, samples = sample_idle_cluster(args.minutes)
    print(format_table(rows))
    if args.json is not None:
        from raypex.cluster.commands.bench import machine_info

        write_json(rows, args.json, {**machine_info(), "details": {"samples": samples}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
