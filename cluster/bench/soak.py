"""`raypex bench --soak MINUTES`: one long training run that watches every process's memory.

About SAMPLES_PER_RUN times in the run the resident memory of each process of the local Ray
cluster (those carrying the token cluster/ray_runtime/reaper.py puts in their environment and their
descendants: workers, GCS, raylet, agents) and of the driver is read, with the object store's use
and spilling. Growth is judged from the time every shard is full (before that, replay filling up
is meant to grow) and a first evaluation has come back (every actor has done its work once) to the
end: the median of the first SAMPLES_PER_END samples after that point against the median of the
last ones.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from pathlib import Path

from raypex.cluster.bench.report import BenchRow
from raypex.cluster.config.loading import with_overrides
from raypex.cluster.ray_runtime import reaper
from raypex.cluster.driver.observer import RunObserver
from raypex.cluster.ray_runtime.reaper import TOKEN_VARIABLE, cluster_variable

SAMPLES_PER_RUN = 120  # a sample every 15 s in a 30-minute soak; at least 1 s apart in short ones
SAMPLES_PER_END = 3
# Ray's memory summary costs the raylet ~13 KB of memory a call (300 calls on an idle cluster:
# +4 MB), so the soak's own probe made the raylet grow: the object store is read on every
# STORE_EVERY-th sample and the last one only (spilling is a running total, so none is missed).
STORE_EVERY = 12
GROWTH_BAR = "<= 1.05"


def cluster_processes(token: str) -> dict[int, str]:
    """pid -> name of every process whose environment carries the cluster's token, and of their
    descendants (reaper.cluster_processes)."""
    found = {}
    for pid in reaper.cluster_processes(cluster_variable(token)):
        try:
            found[pid] = process_name(Path(f"/proc/{pid}/cmdline").read_bytes())
        except OSError:
            continue  # gone meanwhile
    return found


def process_name(cmdline: bytes) -> str:
    """'CollectorActor' for a Ray worker titled 'ray::CollectorActor.run', else the program's
    base name ('gcs_server', 'raylet'), or the Python module it runs."""
    parts = [p.decode(errors="replace") for p in cmdline.split(b"\0") if p]
    if not parts:
        return "?"
    if parts[0].startswith("ray::"):
        return re.split(r"[.\s(]", parts[0][5:], maxsplit=1)[0] or "worker"
    for part in parts[1:]:
        if part.endswith(".py"):
            return Path(part).stem
    return Path(parts[0].split()[0]).name


IDLE_WORKER = "default_worker"  # process_name of a Ray worker that holds no actor yet


def label_new_processes(labels: dict[int, str], found: dict[int, str]) -> None:
    """Label each process in `found` (pid -> name) not in `labels` yet by its name and how many of
    that name came before it ('CollectorActor-1'), so a label stays one process's all run long; a
    process first seen as an idle Ray worker is labelled again once it holds an actor (an actor
    may take one of those after the first sample)."""
    for pid, name in found.items():
        idle_then = labels.get(pid, "").split("-")[0] == IDLE_WORKER
        if pid not in labels or (idle_then and name != IDLE_WORKER):
            same = sum(1 for other, label in labels.items() if other != pid and label.split("-")[0] == name)
            labels[pid] = f"{name}-{same}"


def growth_rows(prefix: str, first: list[dict[str, int]], last: list[dict[str, int]]) -> list[BenchRow]:
    """A row per process present at both ends: the median of its resident memory over the `last`
    samples (label -> bytes) against the median over the `first`, held to GROWTH_BAR."""
    rows = []
    for name in sorted(set(first[0]) & set(last[-1])):
        start = statistics.median(s.get(name, 0) for s in first)
        end = statistics.median(s.get(name, 0) for s in last)
        rows.append(BenchRow.against(f"{prefix}{name}", end, "bytes", start, GROWTH_BAR))
    return rows


def rss_bytes(pid: int) -> int | None:
    """Resident memory of `pid` (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def object_store_mib() -> tuple[float, float]:
    """(MiB in use, MiB spilled) of the object store, from Ray's memory summary."""
    import ray
    from ray._private.internal_api import memory_summary

    # This cluster's GCS, by address: without one Ray follows /tmp/ray/ray_current_cluster, which a
    # `ray start` stopped by a signal leaves behind pointing at a dead GCS (the soak then failed).
    text = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)
    used = re.search(r"Plasma memory usage (\d+) MiB", text)
    spilled = re.search(r"Spilled (\d+) MiB", text)
    return float(used.group(1)) if used else 0.0, float(spilled.group(1)) if spilled else 0.0


class SoakRecorder(RunObserver):
    """A RunObserver: samples memory on a clock, notes when replay is full, ends the run on time."""

    def __init__(self, minutes: float, replay_capacity: int, progress):
        self.seconds = minutes * 60.0
        self.interval = min(15.0, max(1.0, self.seconds / SAMPLES_PER_RUN))
        self.replay_capacity = replay_capacity
        self.progress = progress
        self.token = os.environ.get(TOKEN_VARIABLE, "")
        # t, rss by process, object store MiB and spilled MiB (None between store readings)
        self.samples: list[tuple[float, dict[str, int], float | None, float | None]] = []
        self.full_at: float | None = None  # seconds into the run when every shard was full and an evaluation done
        self._names: dict[int, str] = {}
        self._next = 0.0

    def after_poll(self, run) -> None:
        """Sample when due; end the run once `minutes` have passed."""
        if run.collect_start is None:
            return
        elapsed = time.time() - run.collect_start
        sizes = run.metrics.shard_sizes
        evaluated = run.evaluations.started > 1 or (run.evaluations.started == 1 and run.evaluations.pending is None)
        if self.full_at is None and sizes and min(sizes) >= self.replay_capacity and evaluated:
            self.full_at = elapsed
            self.progress.message(f"soak: replay full and a first evaluation done after {elapsed:.0f}s; growth is "
                                  "measured from here")
        if elapsed >= self._next:
            # The next point of a fixed grid: a poll that comes late (the run loop waits on actors'
            # answers) would otherwise push every later sample back and a short soak fall short.
            self._next = (elapsed // self.interval + 1) * self.interval
            self._sample(elapsed)
        if elapsed >= self.seconds:
            run.end_soon("soak done")

    def before_finish(self, run) -> None:
        """Nothing: the last sample was taken on the clock."""

    def _sample(self, elapsed: float) -> None:
        label_new_processes(self._names, cluster_processes(self.token))
        self._names.setdefault(os.getpid(), "driver-0")
        rss = {name: value for pid, name in self._names.items() if (value := rss_bytes(pid)) is not None}
        used = spilled = None
        if len(self.samples) % STORE_EVERY == 0 or elapsed >= self.seconds:
            used, spilled = object_store_mib()
        self.samples.append((elapsed, rss, used, spilled))

    def rows(self) -> tuple[list[BenchRow], dict]:
        """One row per process (RSS at the end against RSS when replay was full), the object
        store's spilling, and the samples as details."""
        details = {"full_at_s": self.full_at, "samples": [
            {"t": t, "rss": rss, "object_store_mib": used, "spilled_mib": spilled}
            for t, rss, used, spilled in self.samples]}
        after = [s for s in self.samples if self.full_at is not None and s[0] >= self.full_at]
        rows = []
        if len(after) >= 2 * SAMPLES_PER_END:
            rows = growth_rows("soak_rss_", [s[1] for s in after[:SAMPLES_PER_END]],
                               [s[1] for s in after[-SAMPLES_PER_END:]])
        else:
            self.progress.message(f"soak: too few samples after replay was full ({len(after)}); "
                                  "run longer or with a smaller replay.capacity")
        store = [s for s in self.samples if s[2] is not None]
        rows.append(BenchRow("soak_object_store_peak", max((s[2] for s in store), default=0.0), "MiB"))
        rows.append(BenchRow("soak_object_store_spilled", max((s[3] for s in store), default=0.0), "MiB"))
        return rows, details


def soak(bench, run_dir: Path, minutes: float) -> tuple[list[BenchRow], dict]:
    """A training run of `minutes` of the bench's config (no stop on evaluation or env steps) on
    its connected local cluster, with every process's memory sampled throughout."""
    bench.progress.message(f"bench: soak of {minutes:g} minutes (replay.capacity "
                           f"{bench.config.replay.capacity} per shard)")
    config = with_overrides(bench.config, ["stop.env_steps=10000000000", "stop.eval_return=null"])
    recorder = SoakRecorder(minutes, config.replay.capacity, bench.progress)
    run = bench.observed_run(config, run_dir, recorder)
    rows, details = recorder.rows()
    details["summary"] = run.summary()
    return rows, details
