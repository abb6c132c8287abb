"""LearnerActor: LearnerHost (cluster/hosts/learner_host.py) as the run's Ray actor.

Its threads: the default one trains; "replay" takes chunks and the driver's counter reads, so an
insert never queues behind an epoch; "control" takes request_stop and the exporter's warm-up,
which must not queue behind either; "checkpoint" writes and reads replay files, so inserts wait
only while a shard is copied, not while its file is written. Ray records an event in its GCS for every call unless told
not to: the per-chunk, per-epoch and polling methods are marked QUIET. Weights go to the
collectors named (looked up by name, so a learner Ray restarts is built from plain data). The
bench's probes live in a subclass (cluster/bench/learner_probes.py), not here.
"""

from __future__ import annotations

import ray

from raypex.cluster.hosts.learner_host import LearnerHost
from raypex.cluster.hosts.ray_seams import WeightPublisher
from raypex.cluster.plan.topology import ReplayPlan
from raypex.learner.settings import LearnerSettings

CONCURRENCY_GROUPS = {"replay": 1, "control": 1, "checkpoint": 1}

_REPLAY = {"concurrency_group": "replay"}
_QUIET_REPLAY = {"concurrency_group": "replay", "enable_task_events": False}
_CONTROL = {"concurrency_group": "control"}
_CHECKPOINT = {"concurrency_group": "checkpoint"}
_QUIET = {"enable_task_events": False}
# LearnerHost's methods and the Ray options each is served with.
METHOD_OPTIONS = {
    "add_chunk": _QUIET_REPLAY, "insert_room": _QUIET_REPLAY, "replay_stats": _QUIET_REPLAY,
    "write_replay": {**_CHECKPOINT, "enable_task_events": False},  # every checkpoint
    "attach_writer": _REPLAY, "writer_left": _REPLAY, "load_replay": _CHECKPOINT, "count_lost_writes": _REPLAY,
    "request_stop": _CONTROL, "warm_exporter": _CONTROL,
    "train_epoch": _QUIET, "published_weights": _QUIET, "state_bytes": _QUIET,  # per epoch, evaluation, checkpoint
    "is_warmed_up": _CONTROL,  # asked of a learner of a group whose default thread may be stuck in a collective
}


def _served(name: str, options: dict):
    host_method = getattr(LearnerHost, name)

    def method(self, *args, **kwargs):
        return host_method(self, *args, **kwargs)

    method.__name__, method.__qualname__, method.__doc__ = name, f"LearnerActor.{name}", host_method.__doc__
    return ray.method(**options)(method)


class LearnerActor(LearnerHost):
    """LearnerHost publishing to the collector actors, with its methods on Ray's threads."""

    def __init__(self, settings: LearnerSettings, device: str, num_threads: int, replay: ReplayPlan,
                 collector_names: list[str], elastic: bool = False):
        """`elastic`: collectors.num auto, whose collectors are announced to once they join."""
        super().__init__(settings, device, num_threads, replay, WeightPublisher(collector_names, elastic))

    def node_id(self) -> str:
        """The Ray node the learner (and so the replay) runs on."""
        return ray.get_runtime_context().get_node_id()

    def join_group(self, store_host: str, port: int, rank: int, learners: int, own_host: str | None = None) -> None:
        """LearnerHost.join_group, gloo talking from this node's address unless told another."""
        LearnerHost.join_group(self, store_host, port, rank, learners, own_host or ray.util.get_node_ip_address())

    def resend_weights(self, collector_index: int) -> None:
        """Announce the latest weights to one collector (after Ray restarted it, or it joined)."""
        self.publisher.resend(collector_index)

    def collector_left(self, collector_index: int) -> None:
        """Stop announcing weights to a collector that left the run (its node drained or gone)."""
        self.publisher.forget(collector_index)


for _name, _options in METHOD_OPTIONS.items():
    setattr(LearnerActor, _name, _served(_name, _options))
