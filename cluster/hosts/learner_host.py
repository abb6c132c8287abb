"""LearnerHost: a Learner and the run's replay, which live in one process, as the run loop drives them.

No Ray in it: the Ray runtime hosts it as an actor (cluster/hosts/learner_actor.py), the local
runtime calls it in the driver's own process (cluster/local/runtime.py). Collectors insert their
chunks here (`add_chunk`); the learner draws its batches from the same replay without any call.
The run loop paces training one epoch per `train_epoch` call and reads the replay's counters
(`replay_stats`). Evaluation happens elsewhere, on the weights this host publishes;
`export_policy` exports exactly the version an evaluation passed.

No reply carries a reference to other data (across Ray, a ref nested in a return value makes the
learner's core worker keep bookkeeping for it: an epoch's metrics with the weights ref grew the
learner by 3.7 MB a minute on CartPole; without it, flat). The driver gets weights by value
(`published_weights`), when it evaluates or exports.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from raypex.cluster.plan.topology import ReplayPlan
from raypex.cluster.process_clock import process_start_time
from raypex.cluster.storage import read_replay, write_replay
from raypex.learner.settings import LearnerSettings
from raypex.replay.contracts import EpochStats
from raypex.replay.digest import content_digest


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


class LearnerRestarted(RuntimeError):
    """Training state asked of a learner process that was never warmed up: Ray restarted the learner
    and sent it calls meant for the one that died (the driver revives it from a checkpoint). Its
    fresh weights must never reach a checkpoint, an evaluation or policy.pt2 as the run's."""


def refused_by_a_restarted_learner(err: Exception) -> bool:
    """Whether `err` (a runtime's error for a part's exception) is that refusal: the call was meant
    for a learner process that died."""
    return isinstance(getattr(err, "cause", None), LearnerRestarted)


class LearnerHost:
    """Hosts the Learner and the replay; trains, checkpoints and exports when the run loop asks."""

    def __init__(self, settings: LearnerSettings, device: str, num_threads: int, replay: ReplayPlan,
                 publisher, starved: Callable[[], None] | None = None):
        """The replay is built here, in this process, where a GPU learner can keep it on its GPU
        (replay.storage). `publisher` takes each weights version (`publish`) and keeps the newest
        (`latest_weights`); `starved` runs while the replay ratio allows no draw in a process with
        no other thread to insert (the local runtime's collectors collect then)."""
        self.startup = {"process_started": process_start_time()}  # wall clock (summary.json's startup_s)
        import torch  # here only: the driver names the Ray host class without importing torch

        from raypex.learner.learner import Learner

        torch.set_num_threads(max(1, num_threads))
        where = torch.device(device)
        self.replay, self.replay_notice = replay.build(where)
        self.publisher = publisher
        self.learner = Learner(settings, where, self.replay, publisher.publish, starved=starved)
        self.warmed_up = False  # set by warmup: only then does this process train
        self.group_store = None  # the first learner of a group: the store the others join through
        self.startup["constructed"] = time.time()

    # -- the replay ---------------------------------------------------------------------------
    def add_chunk(self, shard: int, chunk, writer_env_steps: int | None = None) -> float:
        """Store a collector's chunk in its shard; returns that collector's insert room."""
        return self.replay.add(shard, chunk, writer_env_steps)

    def insert_room(self) -> float:
        """One collector's insert room now (a throttled collector asks)."""
        return self.replay.insert_room()

    def attach_writer(self, shard: int) -> int:
        """A collector process starts writing to `shard`; the env steps it counts on from."""
        return self.replay.attach_writer(shard)

    def replay_stats(self) -> list[dict]:
        """Every shard's counters and memory figures (the driver reads them a few times a second)."""
        return self.replay.stats()

    def write_replay(self, shard: int, location: str) -> dict:
        """Write one shard's replay to `location` (a path or a URI) in the run's checkpoints, from this process:
        a checkpoint's replay never goes through the driver. Returns the file's manifest entry
        (cluster/driver/checkpoints.py) and `pause_s`, how long inserts and draws waited for the copy."""
        self._refuse_unless_warmed_up()
        state = self.replay.get_state(shard)  # a copy taken under the replay's lock
        pause_s = state.pop("pause_s")
        return {**write_replay(location, state), "pause_s": pause_s}

    def load_replay(self, shard: int, location: str, part: dict | None = None) -> dict:
        """Restore one shard's replay from a checkpoint's file at `location` (a path or a URI), read
        here and checked against its manifest entry `part`; the digest of what the shard now holds
        (replay/digest.py, read back from it) and the transitions its collectors had inserted by then."""
        state = read_replay(location, part)
        self.replay.set_state(shard, state)
        return {"digest": content_digest(self.replay.get_state(shard)["storage"]),
                "inserted": int(state["storage"]["total_added"])}

    def writer_left(self, shard: int, env_steps: int) -> None:
        """`shard`'s collector left with its node after counting `env_steps`: the shard counts as lost
        what it does not hold of them, and its next collector counts on from there."""
        self.replay.writer_left(shard, env_steps)

    def count_lost_writes(self) -> None:
        """This process replaces a learner that died: report what collectors sent that died with it."""
        self.replay.count_lost_writes()

    # -- control ------------------------------------------------------------------------------
    def request_stop(self) -> None:
        """End the epoch in progress after its current update, and every epoch queued after it at once."""
        self.learner.request_stop()

    def warm_exporter(self) -> None:
        """Start importing torch.export's modules on a thread while the run ends (learner/policy_file.py):
        `export_policy`, after the final checkpoint and evaluation, then skips most of its first use."""
        from raypex.learner.policy_file import warm_exporter

        warm_exporter()

    # -- a group of learners (learner.num) -------------------------------------------------------
    def open_group(self, host: str, learners: int) -> int:
        """The first learner of a group: open the store the group forms through, on `host`; its port."""
        from raypex.learner.process_group import open_store

        self.group_store, port = open_store(host, learners)
        return port

    def join_group(self, store_host: str, port: int, rank: int, learners: int, own_host: str) -> None:
        """Train as learner `rank` of a group of `learners` from now on (before warm-up); returns
        once every learner has joined."""
        from raypex.learner.process_group import join

        self.learner.join(join(store_host, port, rank, learners, own_host, self.learner.device.type,
                               self.group_store if rank == 0 else None))

    def is_warmed_up(self) -> bool:
        """Whether this process has trained (a learner of a group that outlived its first learner has)."""
        return self.warmed_up

    # -- training -----------------------------------------------------------------------------
    def warmup(self, state: bytes | None = None, version_floor: int = 0) -> dict:
        """Restore a checkpoint if given, warm the networks up, publish the starting weights.

        `version_floor`: a learner that replaces a dead one publishes above the versions the
        collectors already hold (they ignore any version not newer than theirs)."""
        if state is not None:
            self.learner.load_state_bytes(state)
        self.learner.version = max(self.learner.version, version_floor)
        self.learner.warmup()
        self.learner.publish_weights()
        self.warmed_up = True
        learner = self.learner
        # what a restored learner holds, comparable with its checkpoint's (a Tune exploit's donor)
        restored = {}
        if state is not None:
            from raypex.learner.weights import export_arrays  # torch: imported here, so the driver never does

            restored["weights_sha256"] = content_digest(export_arrays(learner.step.policy))
        return {**restored, "device": str(learner.device), "precision": learner.step.precision.name,
                "cuda_graph": learner.captured, "compiled": learner.compiled,
                "version": learner.version, "updates": learner.updates,
                "replay_storage": self.replay.backend.name, "replay_notice": self.replay_notice,
                "prior_transitions": self.replay.prior.size if self.replay.prior is not None else 0,
                **self.startup, "warmed_up": time.time()}

    def waited_s(self) -> float:
        """Seconds the update loop has waited for data after replay reached its minimum size."""
        return self.learner.feed.wait_s

    def train_epoch(self) -> EpochStats:
        """One epoch's figures (`version`: the newest weights it published)."""
        self._refuse_unless_warmed_up()
        wait_before = self.waited_s()
        group = self.learner.step.gradients
        reduced_before = group.reduce_s if group is not None else 0.0
        stats = self.learner.train_epoch()
        if group is not None:
            stats.allreduce_fraction = (group.reduce_s - reduced_before) / max(stats.epoch_s, 1e-9)
        waited = max(0.0, self.waited_s() - wait_before)
        stats.wait_fraction = waited / max(stats.epoch_s, 1e-9)
        stats.fill_wait_s = self.learner.feed.fill_wait_s
        if self.learner.feedback is not None:
            stats.beta = self.replay.beta
            stats.priority_updates_unsent = self.learner.feedback.unsent
        stats.gpu_busy_fraction = gpu_busy_fraction(self.learner.device)
        stats.writer_env_steps = sum(shard.writer_env_steps for shard in self.replay.shards)
        return stats

    def flush_priorities(self) -> int:
        """At the end of a run, after the last epoch: apply every priority update still on its way
        from the GPU. Returns the transitions whose errors were never applied."""
        if self.learner.feedback is None:
            return 0
        self.learner.feedback.flush()
        return self.learner.feedback.unsent

    def published_weights(self):
        """The newest published weights (a Weights message, by value: see the module docstring)."""
        self._refuse_unless_warmed_up()
        return self.publisher.latest_weights

    def state_bytes(self) -> bytes:
        """The learner's checkpoint (torch.save bytes)."""
        self._refuse_unless_warmed_up()
        return self.learner.state_bytes()

    def export_policy(self, weights=None) -> bytes:
        """The greedy policy as torch.export bytes (policy.pt2): of the given published Weights,
        else of the current online network."""
        if weights is None:
            self._refuse_unless_warmed_up()
        return self.learner.export_policy(None if weights is None else weights.arrays)

    def _refuse_unless_warmed_up(self) -> None:
        if not self.warmed_up:
            raise LearnerRestarted("this learner process was not warmed up: it replaces one that died")

    def pid(self) -> int:
        """This host's process id (bench reads its resident memory)."""
        return os.getpid()

    def profile(self) -> dict:
        """Seconds per phase of the update loop, and of those the time spent waiting for data."""
        return {"phase_s": dict(self.learner.phase_s), "wait_s": self.waited_s()}
