"""CollectorSupervisor: keeps every collector's run loop going for the whole run.

Ray restarts a collector whose process died (max_restarts); the collector then comes back with no
loop running and an old network. The supervisor notices the loop's call ending in an error,
announces the learner's latest weights to the new process and starts its loop again, on the same
shard (the shard lives on in the learner's process, with its data), and ends the run with one line
when a collector keeps dying. Restarts are counted by the shards (each counts the collector
processes attached to it).
"""

from __future__ import annotations

import ray

from cluster.driver.progress import ProgressLine
from cluster.driver.run_errors import RunFailed, error_line


class CollectorSupervisor:
    """Starts, watches and restarts the collectors' run loops."""

    def __init__(self, collectors: list, learner, max_restarts: int, progress: ProgressLine):
        self.collectors = collectors
        self.learner = learner
        self.max_restarts = max_restarts
        self.progress = progress
        self.loops: list = []  # each collector's running `run` call
        self.loop_failures = [0] * len(collectors)  # loops that ended in an error

    def start(self) -> None:
        """Start every collector's loop (they act with their own network until weights come)."""
        self.loops = [c.run.remote() for c in self.collectors]

    def check(self) -> None:
        """Restart the loop of every collector whose loop ended in an error (RunFailed when one
        has failed more often than its restarts allow)."""
        done, _ = ray.wait(self.loops, num_returns=len(self.loops), timeout=0)
        for ref in done:
            i = self.loops.index(ref)
            try:
                ray.get(ref)
                continue  # returned normally: it was asked to stop
            except ray.exceptions.RayError as err:
                reason = error_line(err)
            self.loop_failures[i] += 1
            # A loop resubmitted while Ray is still restarting the actor fails once more; allow that.
            if self.loop_failures[i] > 2 * (self.max_restarts + 1):
                raise RunFailed(f"collector {i} failed {self.loop_failures[i]} times; last error: {reason}")
            self.progress.message(f"collector {i} stopped ({reason}); restarting it on its shard")
            collector = self.collectors[i]
            self.learner.resend_weights.remote(i)
            self.loops[i] = collector.run.remote()

    def stop(self) -> None:
        """Ask every collector to end its loop after the chunk in progress."""
        for collector in self.collectors:
            collector.stop.remote()

    def wait_stopped(self, timeout_s: float = 5.0) -> None:
        """Wait (at most `timeout_s`) for every loop to return, so that counters read afterwards,
        and the final checkpoint that records them, include each collector's last chunk."""
        if self.loops:
            ray.wait(self.loops, num_returns=len(self.loops), timeout=timeout_s)
