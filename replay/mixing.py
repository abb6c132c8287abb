"""Which shard serves the next micro-batch, and whether the learner may sample at all.

Each micro-batch comes from one shard chosen with probability proportional to that shard's size,
so over many micro-batches every stored transition is equally likely, whichever shard holds it.
The global samples-per-insert limit is applied to the samples the learner has *requested*
(in flight included) against the inserts the shards last reported.
"""

from __future__ import annotations

import numpy as np

from replay.contracts import ShardCounters
from replay.rate_limit import SamplesPerInsertLimiter


class ShardMixer:
    """Keeps the latest counters of every shard and picks shards for sample requests."""

    def __init__(self, num_shards: int, micro_batch: int, limiter: SamplesPerInsertLimiter, seed: int):
        self.micro_batch = micro_batch
        self.limiter = limiter
        self.rng = np.random.default_rng(seed)
        self.sizes = np.zeros(num_shards, np.int64)
        self.inserted = np.zeros(num_shards, np.int64)
        self.requested = 0

    def __setstate__(self, state: dict) -> None:
        # A mixer made by the wiring reaches the learner's process through Ray, which hands numpy
        # arrays over read-only; the counters are updated in place, so they become its own copies.
        self.__dict__.update(state)
        self.sizes = self.sizes.copy()
        self.inserted = self.inserted.copy()

    def observe(self, counters: ShardCounters) -> None:
        """Record a shard's counters (they come back with every add, sample or poll).

        Replies can arrive out of order (a background refresh may land after a newer sample
        reply); both counters only ever grow, so the larger value is the newer one.
        """
        shard = counters["shard_id"]
        self.sizes[shard] = max(self.sizes[shard], counters["size"])
        self.inserted[shard] = max(self.inserted[shard], counters["inserted"])

    def may_sample(self) -> bool:
        """Whether one more micro-batch may be requested under the limiter."""
        return self.limiter.can_sample(
            int(self.sizes.sum()), int(self.inserted.sum()), self.requested, self.micro_batch
        )

    def next_shard(self) -> int | None:
        """The shard to request the next micro-batch from, or None when the limiter says wait."""
        if not self.may_sample():
            return None
        self.requested += self.micro_batch
        total = self.sizes.sum()
        return int(self.rng.choice(len(self.sizes), p=self.sizes / total))
