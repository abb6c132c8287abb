"""In-process implementations of the seams of replay/contracts.py, beside the Ray ones in
cluster/hosts/ray_seams.py: the same collectors, replay and learner connected by plain calls."""

from __future__ import annotations

from raypex.replay.contracts import PollWeights, Weights


class WeightBoard:
    """The learner's publisher for collectors in this process: keeps the newest version and hands
    it to each reader once (what WeightPublisher and each collector's WeightInbox do across Ray)."""

    def __init__(self):
        self.latest_weights: Weights | None = None

    def publish(self, weights: Weights) -> None:
        """Make `weights` the newest version."""
        self.latest_weights = weights

    def reader(self) -> PollWeights:
        """A PollWeights for one collector: the newest version it has not seen, else None."""
        seen = -1

        def poll() -> Weights | None:
            nonlocal seen
            weights = self.latest_weights
            if weights is None or weights.version <= seen:
                return None
            seen = weights.version
            return weights

        return poll


class ShardWriter:
    """Collector i -> shard i of a replay in this process (what ChunkSink is across Ray). Its first
    chunk attaches the collector to the shard, so a resumed run's collector counts its env steps on
    from what the shard's checkpoint holds, as a collector actor does."""

    def __init__(self, host, index: int):
        self.host = host  # a LearnerHost
        self.index = index
        self.collector = None  # set once the collector writing here is built
        self._attached = False

    def push(self, chunk) -> None:
        """Store the chunk, counting the collector's env steps on from its shard's when it is the first."""
        if not self._attached:
            self.collector.env_steps += self.host.attach_writer(self.index)
            self._attached = True
        self.host.add_chunk(self.index, chunk, self.collector.env_steps)
