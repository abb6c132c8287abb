"""In-process implementations of the seams of replay/contracts.py, beside the Ray ones in
cluster/hosts/ray_seams.py: the same collectors, shards and learner connected by plain calls."""

from __future__ import annotations

from collections.abc import Callable

from replay.contracts import Batch, PollWeights, PriorityUpdate, Weights, with_keys
from replay.mixing import ShardMixer
from replay.shard import ReplayShard


class WeightBoard:
    """PublishWeights for collectors in this process: keeps the newest version and hands it to
    each reader once (what WeightPublisher and each collector's WeightInbox do across Ray)."""

    def __init__(self):
        self.latest: Weights | None = None

    def publish(self, weights: Weights) -> None:
        """Make `weights` the newest version."""
        self.latest = weights

    def reader(self) -> PollWeights:
        """A PollWeights for one collector: the newest version it has not seen, else None."""
        seen = -1

        def poll() -> Weights | None:
            nonlocal seen
            weights = self.latest
            if weights is None or weights.version <= seen:
                return None
            seen = weights.version
            return weights

        return poll


class LocalBatchSource:
    """NextBatch over shards in this process: each micro-batch from one shard the ShardMixer draws
    in proportion to size, under the learner's share of the limiter. When the limiter says wait,
    `starved` runs (the lockstep replica: every collector collects a chunk) until it allows a draw;
    there is no other thread to insert meanwhile."""

    def __init__(self, shards: list[ReplayShard], mixer: ShardMixer, starved: Callable[[], None]):
        self.shards = shards
        self.mixer = mixer
        self.starved = starved

    def _observe_all(self) -> None:
        for shard in self.shards:
            self.mixer.observe(shard.counters())

    def next_batch(self) -> Batch:
        """The next micro-batch (see the class docstring)."""
        self._observe_all()
        while (index := self.mixer.next_shard()) is None:
            self.starved()
            self._observe_all()
        batch, counters = self.shards[index].sample(self.mixer.micro_batch, 1, None, self.mixer.priority_view(index))
        self.mixer.observe(counters)
        return with_keys({name: array[0] for name, array in batch.items()}, index, counters["incarnation"])

    def send_priorities(self, updates: list[PriorityUpdate]) -> None:
        """SendPriorities in this process: each update straight to its shard."""
        for update in updates:
            self.shards[update.shard].update_priorities(update.incarnation, update.index, update.stamp, update.td_abs)
