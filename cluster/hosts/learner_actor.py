"""LearnerActor: the Ray shell around a Learner, its batch source and its weight publisher.

The driver paces it one epoch per `train_epoch` call (two queued, so it never idles between
epochs). Evaluation happens elsewhere (EvaluatorActor), on the weights refs this actor publishes;
`export_policy` can export exactly the version an evaluation passed.
"""

from __future__ import annotations

import os
import time

import numpy as np
import ray

from cluster.hosts.ray_seams import BatchSource, WeightPublisher
from learner.settings import LearnerSettings
from replay.mixing import ShardMixer
from replay.rate_limit import SamplesPerInsertLimiter


def gpu_busy_fraction(device) -> float | None:
    """NVML's share of the last sample period in which a kernel ran on the learner's GPU (None on
    CPU, or when NVML is not available)."""
    if device.type != "cuda":
        return None
    import torch

    try:
        return torch.cuda.utilization(device) / 100.0
    except (ImportError, ModuleNotFoundError, RuntimeError):  # no pynvml, or NVML unsupported: no scalar
        return None


class LearnerActor:
    """Hosts the Learner; trains, evaluates, checkpoints and exports on the driver's request."""

    def __init__(
        self,
        settings: LearnerSettings,
        device: str,
        num_threads: int,
        shards: list,
        collectors: list,
        limiter: SamplesPerInsertLimiter,
        prefetch: int,
    ):
        import torch  # inside the actor only: the driver names this class without importing torch

        from learner.learner import Learner

        torch.set_num_threads(max(1, num_threads))
        mixer = ShardMixer(len(shards), settings.micro_batch, limiter, settings.seed)
        self.source = BatchSource(shards, mixer, prefetch, should_stop=lambda: self.learner.stop_requested)
        self.publisher = WeightPublisher(collectors)
        self.learner = Learner(settings, torch.device(device), self.source.next_batch, self.publisher.publish)

    @ray.method(concurrency_group="control")
    def request_stop(self) -> None:
        """End the epoch in progress after its current update, and every epoch queued after it
        at once (served on its own thread, so it does not queue behind those epochs)."""
        self.learner.stop_requested = True

    def warmup(self, state: bytes | None = None) -> dict:
        """Restore a checkpoint if given, warm the networks up, publish the starting weights."""
        if state is not None:
            self.learner.load_state_bytes(state)
        self.learner.warmup()
        self.learner.publish_weights()
        learner = self.learner
        return {"device": str(learner.device), "precision": learner.precision.name,
                "cuda_graph": learner.captured, "compiled": learner.compiled,
                "version": learner.version, "updates": learner.updates}

    def _waited_s(self) -> float:
        """Seconds the update loop has waited for data after replay reached its minimum size.
        A threaded feed measures its own wait (the source's waits overlap with updates there)."""
        feed = self.learner.feed
        if feed.threaded:
            return feed.wait_s - self.source.fill_wait_s
        return self.source.wait_s

    def train_epoch(self) -> dict:
        """One epoch; its metrics carry the newest published weights (ref and version)."""
        wait_before = self._waited_s()
        metrics = self.learner.train_epoch()
        waited = max(0.0, self._waited_s() - wait_before)
        metrics["wait_fraction"] = waited / max(metrics["epoch_s"], 1e-9)
        metrics["fill_wait_s"] = self.source.fill_wait_s
        metrics["weights_ref"], metrics["weights_version"] = self.publisher.latest
        busy = gpu_busy_fraction(self.learner.device)
        if busy is not None:
            metrics["gpu_busy_fraction"] = busy
        return metrics

    def latest_weights(self) -> tuple:
        """(ref, version) of the newest published weights."""
        return self.publisher.latest

    def state_bytes(self) -> bytes:
        """The learner's checkpoint (torch.save bytes)."""
        return self.learner.state_bytes()

    def export_policy(self, arrays: dict | None = None) -> bytes:
        """The greedy policy as torch.export bytes (policy.pt2): of the given published weights
        (Ray resolves a ref passed here to its arrays), else of the current online network."""
        return self.learner.export_policy(arrays)

    def pid(self) -> int:
        """This actor's process id (bench reads its resident memory)."""
        return os.getpid()

    def profile(self) -> dict:
        """Seconds per phase of the update loop, and of those the time spent waiting for data."""
        return {"phase_s": dict(self.learner.phase_s), "wait_s": self._waited_s()}

    def publish_now(self) -> float:
        """Publish the current weights as a new version; returns the wall clock at the put
        (bench measures from it to the moment each collector acts with that version)."""
        started = time.time()
        self.learner.publish_weights()
        return started

    def put_get_ms(self, repeats: int = 20) -> float:
        """Median milliseconds of one ray.put plus one ray.get of the current weights (the
        reference for the broadcast latency)."""
        from learner.weights import export_arrays

        arrays = export_arrays(self.learner.online)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            ray.get(ray.put(arrays))
            times.append((time.perf_counter() - start) * 1e3)
        return float(np.median(times))

    def measure(self, seconds: float, from_memory: bool) -> dict:
        """The epoch loop's samples/s, GPU busy fraction and wait fraction over `seconds`: fed by
        the shards (one epoch first, off the clock: it waits for replay's minimum size), or fed
        from 32 real batches taken from the shards and cycled in memory (the reference)."""
        from learner.throughput import from_memory as memory_rate
        from learner.throughput import timed_epochs

        if from_memory:
            rate, busy = memory_rate(self.learner, self.learner.feed.take_batches(32), seconds)
            return {"samples_per_s": rate, "gpu_busy": busy, "wait_fraction": 0.0}
        self.learner.train_epoch()
        waited, source_waited, start = self._waited_s(), self.source.wait_s, time.perf_counter()
        rate, busy = timed_epochs(self.learner, seconds)
        elapsed = time.perf_counter() - start
        # With a threaded feed the source waits on its thread: this says whether that thread is
        # bound by Ray's replies (near 1) or by its own work (near 0).
        source_wait = (self.source.wait_s - source_waited) / elapsed
        return {"samples_per_s": rate, "gpu_busy": busy, "wait_fraction": max(0.0, (self._waited_s() - waited) / elapsed),
                "source_wait_fraction": source_wait}

    def node_id(self) -> str:
        """The Ray node the learner runs on."""
        return ray.get_runtime_context().get_node_id()

    def resend_weights(self, collector) -> None:
        """Announce the latest weights to one collector (after Ray restarted it)."""
        self.publisher.resend(collector)
