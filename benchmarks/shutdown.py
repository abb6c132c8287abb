"""`python -m benchmarks.shutdown [--rounds N]`: how long a local cluster takes to go at a run's end.

raypex starts its local cluster's processes with SIGTERM blocked (so that a SIGTERM to the whole
process group reaches the driver alone), and Ray's own graceful shutdown sends each process
SIGTERM and waits up to a second for it before SIGKILL. cluster/ray_runtime/wiring.py `shutdown`
kills them at once instead. This starts a local cluster as a run does (`connect`), gives it one
task, and times each way of ending it, alternating, N rounds each; it prints the medians and how
many of the cluster's processes were still running a second after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import ray

from raypex.cluster.ray_runtime import wiring
from raypex.cluster.ray_runtime.reaper import TOKEN_VARIABLE, cluster_processes, cluster_variable, still_running


SETTLE_S = 1.0


@ray.remote(num_cpus=0)
def answer() -> int:
    return 1


def one_round(graceful: bool) -> tuple[float, int]:
    """Seconds to end a fresh local cluster (Ray's graceful shutdown, or raypex's), and how many of
    its processes still ran SETTLE_S after."""
    wiring.connect(None)
    ray.get(answer.remote())
    processes = cluster_processes(cluster_variable(os.environ[TOKEN_VARIABLE]))
    started = time.perf_counter()
    if graceful:
        ray.shutdown()
    else:
        wiring.shutdown()
    seconds = time.perf_counter() - started
    settle_until = time.monotonic() + SETTLE_S  # a process SIGKILLed a moment ago may still be in /proc
    while (left := still_running(processes)) and time.monotonic() < settle_until:
        time.sleep(0.05)
    wiring.reap(processes)  # what Ray's shutdown left goes before the next round
    return seconds, len(left)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shutdown", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {"raypex": [], "ray_graceful": []}
    left: dict[str, int] = {"raypex": 0, "ray_graceful": 0}
    for _ in range(args.rounds):
        for name in times:
            seconds, running = one_round(graceful=name == "ray_graceful")
            times[name].append(seconds)
            left[name] += running
    for name, seen in times.items():
        print(f"{name}: median {statistics.median(seen):.2f}s over {len(seen)} rounds "
              f"({', '.join(f'{s:.2f}' for s in seen)}); processes running {SETTLE_S:g}s after: {left[name]}")


if __name__ == "__main__":
    main()
