"""LearnerActor: the Ray shell around a Learner, its batch source and its weight publisher.

The driver paces it one epoch per `train_epoch` call (two queued, so it never idles between
epochs). Evaluation happens elsewhere (EvaluatorActor), on the weights this actor publishes;
`export_policy` can export exactly the version an evaluation passed.

No reply of this actor carries an ObjectRef: a ref nested in a return value makes this process's
Ray core worker keep bookkeeping for it after the caller has dropped it (an epoch's metrics with
the weights ref grew the learner by 3.7 MB a minute on CartPole; without it, flat). The driver
gets weights by value (`published_weights`), when it evaluates or exports. The bench's probes live
in a subclass (cluster/bench/learner_probes.py), not here.
"""

from __future__ import annotations

import os

import ray

from cluster.hosts.priority_sender import PrioritySender
from cluster.hosts.ray_seams import QUIET, BatchSource, WeightPublisher
from learner.settings import LearnerSettings


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
    """Hosts the Learner; trains, checkpoints and exports on the driver's request."""

    def __init__(
        self,
        settings: LearnerSettings,
        device: str,
        num_threads: int,
        source: BatchSource,
        publisher: WeightPublisher,
        priorities: PrioritySender | None = None,
    ):
        """`source` (every shard -> this learner), `publisher` (this learner -> every collector)
        and, for prioritized replay, `priorities` (this learner -> the shards) are the connections
        cluster/driver/wiring.py made; the host only runs them."""
        import torch  # inside the actor only: the driver names this class without importing torch

        from learner.learner import Learner

        torch.set_num_threads(max(1, num_threads))
        self.source = source
        self.source.should_stop = lambda: self.learner.stop_requested
        self.publisher = publisher
        self.priorities = priorities
        self.learner = Learner(settings, torch.device(device), self.source.next_batch, self.publisher.publish,
                               priorities)

    @ray.method(concurrency_group="control")
    def request_stop(self) -> None:
        """End the epoch in progress after its current update, and every epoch queued after it
        at once (served on its own thread, so it does not queue behind those epochs)."""
        self.learner.request_stop()

    def warmup(self, state: bytes | None = None, version_floor: int = 0) -> dict:
        """Restore a checkpoint if given, warm the networks up, publish the starting weights.

        `version_floor`: a learner that replaces a dead one publishes above the versions the
        collectors already hold (they ignore any version not newer than theirs)."""
        if state is not None:
            self.learner.load_state_bytes(state)
        self.learner.version = max(self.learner.version, version_floor)
        self.learner.warmup()
        self.learner.publish_weights()
        learner = self.learner
        return {"device": str(learner.device), "precision": learner.precision.name,
                "cuda_graph": learner.captured, "compiled": learner.compiled,
                "version": learner.version, "updates": learner.updates}

    def waited_s(self) -> float:
        """Seconds the update loop has waited for data after replay reached its minimum size.
        A threaded feed measures its own wait (the source's waits overlap with updates there)."""
        feed = self.learner.feed
        if feed.threaded:
            return feed.wait_s - self.source.fill_wait_s
        return self.source.wait_s

    @QUIET
    def train_epoch(self) -> dict:
        """One epoch's metrics (`version`: the newest weights it published)."""
        wait_before = self.waited_s()
        metrics = self.learner.train_epoch()
        waited = max(0.0, self.waited_s() - wait_before)
        metrics["wait_fraction"] = waited / max(metrics["epoch_s"], 1e-9)
        metrics["fill_wait_s"] = self.source.fill_wait_s
        if self.priorities is not None:
            metrics["beta"] = self.source.mixer.beta
            metrics["priority_updates_unsent"] = self._priorities_unsent()
        busy = gpu_busy_fraction(self.learner.device)
        if busy is not None:
            metrics["gpu_busy_fraction"] = busy
        return metrics

    def flush_priorities(self) -> int:
        """At the end of a run, after the last epoch: send every priority update still held here and
        wait for the shards to take them. Returns the transitions whose errors never went out."""
        if self.priorities is None:
            return 0
        self.learner.feedback.flush()
        self.priorities.flush()
        return self._priorities_unsent()

    def _priorities_unsent(self) -> int:
        """Transitions whose new |TD errors| never went out: dropped at the in-flight bound, or
        never copied off the GPU in time."""
        return self.priorities.dropped + self.learner.feedback.unsent

    @QUIET  # asked for every evaluation: several a second on small envs
    def published_weights(self):
        """The newest published weights (a Weights message, by value: see the module docstring)."""
        return self.publisher.latest_weights

    @QUIET  # every checkpoint: hundreds in a long run
    def state_bytes(self) -> bytes:
        """The learner's checkpoint (torch.save bytes)."""
        return self.learner.state_bytes()

    def export_policy(self, weights=None) -> bytes:
        """The greedy policy as torch.export bytes (policy.pt2): of the given published Weights
        (Ray resolves a ref passed here), else of the current online network."""
        return self.learner.export_policy(None if weights is None else weights.arrays)

    def pid(self) -> int:
        """This actor's process id (bench reads its resident memory)."""
        return os.getpid()

    def profile(self) -> dict:
        """Seconds per phase of the update loop, and of those the time spent waiting for data."""
        return {"phase_s": dict(self.learner.phase_s), "wait_s": self.waited_s()}

    def node_id(self) -> str:
        """The Ray node the learner runs on."""
        return ray.get_runtime_context().get_node_id()

    def resend_weights(self, collector) -> None:
        """Announce the latest weights to one collector (after Ray restarted it)."""
        self.publisher.resend(collector)
