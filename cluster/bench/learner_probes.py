"""ProbedLearnerActor: the learner's host with what only `raypex bench` asks of it.

Kept out of the production host (cluster/hosts/learner_actor.py): a run never calls these.
"""

from __future__ import annotations

import time

import numpy as np
import ray

from raypex.cluster.hosts.learner_actor import LearnerActor


class ProbedLearnerActor(LearnerActor):
    """LearnerActor plus the bench's probes: publish on demand, the put+get reference, and the
    epoch loop's speed fed by the replay or from memory."""

    def publish_now(self) -> float:
        """Publish the current weights as a new version; returns the wall clock at the put
        (bench measures from it to the moment each collector acts with that version)."""
        started = time.time()
        self.learner.publish_weights()
        return started

    def put_get_ms(self, repeats: int = 20) -> float:
        """Median milliseconds of one ray.put plus one ray.get of the current weights (the
        reference for the broadcast latency)."""
        from raypex.learner.weights import export_arrays

        arrays = export_arrays(self.learner.policy)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            ray.get(ray.put(arrays))
            times.append((time.perf_counter() - start) * 1e3)
        return float(np.median(times))

    def measure(self, seconds: float, from_memory: bool) -> dict:
        """The epoch loop's samples/s, GPU busy fraction and wait fraction over `seconds`: fed by
        the replay (one epoch first, off the clock: it waits for replay's minimum size), or fed
        from 32 real batches drawn from the replay once and cycled (the reference: the same loop
        with nothing drawn or gathered on the host; on a GPU replay, indices already on the GPU)."""
        from raypex.cluster.bench.throughput import from_memory as memory_rate
        from raypex.cluster.bench.throughput import timed_epochs

        if from_memory:
            rate, busy = memory_rate(self.learner, self.learner.feed.take(32), seconds)
            return {"samples_per_s": rate, "gpu_busy": busy, "wait_fraction": 0.0}
        self.learner.train_epoch()
        waited, start = self.waited_s(), time.perf_counter()
        rate, busy = timed_epochs(self.learner, seconds)
        elapsed = time.perf_counter() - start
        return {"samples_per_s": rate, "gpu_busy": busy, "wait_fraction": max(0.0, (self.waited_s() - waited) / elapsed),
                "replay_storage": self.replay.backend.name}
