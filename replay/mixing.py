"""Which shard serves the next micro-batch, and whether the learner may sample at all.

Each micro-batch comes from one shard chosen with probability proportional to that shard's size,
so over many micro-batches every stored transition is equally likely, whichever shard holds it.
The global samples-per-insert limit is applied to the samples the learner has *requested*
(in flight included) against the inserts the shards last reported.
"""

from __future__ import annotations

import numpy as np

from replay.contracts import FleetView, ShardCounters
from replay.rate_limit import SamplesPerInsertLimiter


class ShardMixer:
    """Keeps the latest counters of every shard and picks shards for sample requests."""

    def __init__(self, num_shards: int, micro_batch: int, limiter: SamplesPerInsertLimiter, seed: int):
        self.micro_batch = micro_batch
        self.limiter = limiter
        self.rng = np.random.default_rng(seed)
        self.sizes = np.zeros(num_shards, np.int64)
        self.inserted = np.zeros(num_shards, np.int64)
        # Inserts counted by shard processes that have since been replaced (a restarted shard
        # counts from zero again), and which process each shard's counters come from now.
        self.inserted_before = np.zeros(num_shards, np.int64)
        self.incarnations: list[str | None] = [None] * num_shards
        self._retired: list[set[str]] = [set() for _ in range(num_shards)]
        self.requested = 0
        # What the shards say was sampled from them: more than `requested` only for replay
        # restored from a checkpoint (a resumed run), whose samples count toward the ratio too.
        self.sampled_reported = np.zeros(num_shards, np.int64)

    def __setstate__(self, state: dict) -> None:
        # A mixer made by the wiring reaches the learner's process through Ray, which hands numpy
        # arrays over read-only; the counters are updated in place, so they become its own copies.
        self.__dict__.update(state)
        self.sizes = self.sizes.copy()
        self.inserted = self.inserted.copy()
        self.inserted_before = self.inserted_before.copy()
        self.sampled_reported = self.sampled_reported.copy()

    def observe(self, counters: ShardCounters) -> None:
        """Record a shard's counters (they come back with every add, sample or poll).

        Replies can arrive out of order (a background refresh may land after a newer sample
        reply); both counters only ever grow within one shard process, so the larger value is the
        newer one. A shard that Ray restarted answers under a new incarnation from zero: its size
        starts again, the inserts of the process it replaced still count for the rate limit, and
        late replies of that process are ignored.
        """
        shard = counters["shard_id"]
        born = counters.get("incarnation")
        if born != self.incarnations[shard]:
            if born in self._retired[shard]:
                return
            if self.incarnations[shard] is not None:
                self._retired[shard].add(self.incarnations[shard])
                self.inserted_before[shard] += self.inserted[shard]
                self.sizes[shard] = self.inserted[shard] = 0
            self.incarnations[shard] = born
        self.sampled_reported[shard] = max(self.sampled_reported[shard], counters.get("sampled", 0))
        self.sizes[shard] = max(self.sizes[shard], counters["size"])
        self.inserted[shard] = max(self.inserted[shard], counters["inserted"])

    def _inserted_and_sampled(self) -> tuple[int, int]:
        """The fleet's inserts (replaced shard processes' included) and samples, as the limiter counts them."""
        return (int(self.inserted.sum() + self.inserted_before.sum()),
                max(self.requested, int(self.sampled_reported.sum())))

    def may_sample(self) -> bool:
        """Whether one more micro-batch may be requested under the limiter."""
        return self.limiter.can_sample(int(self.sizes.sum()), *self._inserted_and_sampled(), self.micro_batch)

    def next_shard(self) -> int | None:
        """The shard to request the next micro-batch from, or None when the limiter says wait."""
        if not self.may_sample():
            return None
        self.requested += self.micro_batch
        total = self.sizes.sum()
        return int(self.rng.choice(len(self.sizes), p=self.sizes / total))

    def fleet_view(self, shard: int) -> FleetView | None:
        """What shard `shard` needs to limit its inserts by the global ratio (None while the
        limiter is off or the shard has not answered yet): an equal share of the fleet's insert
        room, so that the shards together never insert more than the whole room between views."""
        incarnation = self.incarnations[shard]
        if not self.limiter.enabled or incarnation is None:
            return None
        room = self.limiter.insert_room(*self._inserted_and_sampled())
        return {"room": room / len(self.sizes), "inserted_seen": int(self.inserted[shard]),
                "incarnation": incarnation}

    def lost(self, micro_batches: int) -> None:
        """Requested micro-batches that never came (their shard died): they were not sampled."""
        self.requested -= micro_batches * self.micro_batch
