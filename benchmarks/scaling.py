"""`python -m benchmarks.scaling [CONFIG] --pairs 2,8,16,32 [--seconds S] [--json PATH] [k=v ...]`:
what grows with the number of collectors (each with its shard in the learner) around one learner, measured on one machine
and fitted to extrapolate.

Each N runs in its own process on a fresh local Ray cluster: the config with collectors.num=N at
fractional CPUs (so that N pairs fit this machine's cores as simulated nodes would), trained for
`seconds` after the collectors start. Measured at the end of each run:

  poll_ms              one driver round of counter calls to every collector and the replay (the
                       driver does one per progress poll, several a second)
  broadcast_ms         the learner's publish of one weights version (ray.put and one announce
                       call per collector), from its own phase clock
  feed_ms_per_update   the learner's feed phase per update (its draw and gather from the replay)
  gcs_server_mb, raylet_mb, driver_mb   resident memory
  object_store_mib     the object store's use (weights versions and chunks in flight)

Each is fitted as a + b*N (least squares) and given at 100 and 1,000 pairs. On a small machine the
pairs share its cores, so the per-call costs include that contention: read the slopes as upper
bounds of what one more pair costs the parts that do not grow with the cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raypex.cluster.driver.observer import RunObserver

SCALING_OVERRIDES = ["collectors.num_cpus=0.03", "learner.num_cpus=0.5", "env.num_envs=4",
                     "stop.eval_return=null", "stop.env_steps=10000000000", "eval.every_env_steps=10000000000"]
MEASURES = ("poll_ms", "broadcast_ms", "feed_ms_per_update", "gcs_server_mb", "raylet_mb", "driver_mb",
            "object_store_mib")


class ScalingRecorder(RunObserver):
    """A RunObserver: times the driver's counter round while the run goes, ends it after
    `seconds`, and reads the learner's clocks and every process's memory before it finishes."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.poll_ms: list[float] = []
        self.at_end: dict = {}
        self._next_probe = 0.0

    def after_poll(self, run) -> None:
        """Time one stats round to all collectors and the replay every 2 s; end the run on time."""
        import ray

        if run.collect_start is None:
            return
        elapsed = time.time() - run.collect_start
        if elapsed >= self._next_probe:
            self._next_probe = elapsed + 2.0
            start = time.perf_counter()
            ray.get([c.stats.remote() for c in run.actors.collectors] + [run.actors.learner.replay_stats.remote()])
            self.poll_ms.append((time.perf_counter() - start) * 1e3)
        if elapsed >= self.seconds:
            run.end_soon("scaling window done")

    def before_finish(self, run) -> None:
        """The learner's clocks and the cluster's memory, while everything is still up."""
        import ray

        from raypex.cluster.bench.soak import cluster_processes, object_store_mib, rss_bytes
        from raypex.cluster.ray_runtime.reaper import TOKEN_VARIABLE

        profile = ray.get(run.actors.learner.profile.remote())
        epochs = max(run.epochs_done, 1)
        publishes = max(epochs // run.config.learner.broadcast_every_epochs, 1)
        updates = epochs * run.config.learner.updates_per_epoch
        rss: dict[str, float] = {}
        for pid, name in cluster_processes(os.environ.get(TOKEN_VARIABLE, "")).items():
            rss[name] = rss.get(name, 0.0) + (rss_bytes(pid) or 0) / 2**20
        self.at_end = {
            "broadcast_ms": profile["phase_s"]["broadcast"] * 1e3 / publishes,
            "feed_ms_per_update": profile["phase_s"]["feed"] * 1e3 / updates,
            "gcs_server_mb": rss.get("gcs_server", 0.0), "raylet_mb": rss.get("raylet", 0.0),
            "driver_mb": (rss_bytes(os.getpid()) or 0) / 2**20,
            "object_store_mib": object_store_mib()[0], "epochs": epochs,
        }


def measure_one(config_arg: list[str], pairs: int, seconds: float) -> dict:
    """One N on a fresh local cluster (this process): the measures of module docstring."""
    from raypex.actors.envs import inspect_env
    from raypex.cluster.bench.ray_stages import ClusterBench
    from raypex.cluster.config.arguments import split_positional
    from raypex.cluster.config.loading import load_config
    from raypex.cluster.driver.progress import ProgressLine
    from raypex.cluster.ray_runtime.wiring import connect, shutdown

    path, overrides = split_positional(config_arg)
    config = load_config(path, [*overrides, *SCALING_OVERRIDES, f"collectors.num={pairs}"])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    connect(None)
    try:
        bench = ClusterBench(config, spec, ProgressLine(sys.stderr), "cpu")
        recorder = ScalingRecorder(seconds)
        with tempfile.TemporaryDirectory(prefix="raypex-scaling-") as scratch:
            bench.observed_run(config, Path(scratch) / "run", recorder)
    finally:
        shutdown()
    return {"pairs": pairs, "poll_ms": statistics.median(recorder.poll_ms) if recorder.poll_ms else None,
            **recorder.at_end}


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(a, b) of the least-squares line a + b*N through (N, value) points."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return mean_y - slope * mean_x, slope


def table(results: list[dict]) -> str:
    """Markdown: one row per measure, a column per N, the fitted slope and the extrapolations."""
    header = "| measure | " + " | ".join(f"N={r['pairs']}" for r in results) + " | per pair | N=100 | N=1000 |"
    lines = [header, "|" + " --- |" * (len(results) + 4)]
    for measure in MEASURES:
        points = [(r["pairs"], r[measure]) for r in results if r.get(measure) is not None]
        if len(points) < 2:
            continue
        a, b = fit(points)
        cells = " | ".join(f"{r[measure]:.2f}" if r.get(measure) is not None else "-" for r in results)
        lines.append(f"| {measure} | {cells} | {b:+.3f} | {a + 100 * b:.1f} | {a + 1000 * b:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Every N in its own process, one after another; the table on stdout."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("args", nargs="*", help="CONFIG (default cartpole) and key=value overrides")
    parser.add_argument("--pairs", default="2,8,16,32", help="collector counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=40.0, help="training seconds per N after collection starts")
    parser.add_argument("--json", type=Path, help="write the measures here")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child: measure this N, JSON on stdout
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure_one(args.args, args.one, args.seconds)))
        return 0
    results = []
    for pairs in (int(item) for item in args.pairs.split(",")):
        print(f"scaling: {pairs} pairs", file=sys.stderr, flush=True)
        done = subprocess.run([sys.executable, "-m", "benchmarks.scaling", *args.args, "--one", str(pairs),
                               "--seconds", str(args.seconds)], check=False, stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"scaling: {pairs} pairs failed (exit {done.returncode})", file=sys.stderr)
            return 1
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
