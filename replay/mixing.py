"""Which shard serves the next micro-batch, and whether the learner may sample at all.

Each micro-batch comes from one shard chosen with probability proportional to that shard's size,
so over many micro-batches every stored transition is equally likely, whichever shard holds it.
With prioritized replay the shard is chosen in proportion to its total priority mass instead, and
the shard is told that probability and the global figures (a PriorityView), so its draws and
importance weights are those of one prioritized buffer of every shard (replay/priorities.py).
The global samples-per-insert limit is applied to the samples the learner has *requested*
(in flight included) against the inserts the shards last reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replay.contracts import FleetView, PriorityView, ShardCounters
from replay.rate_limit import SamplesPerInsertLimiter


@dataclass(frozen=True)
class BetaSchedule:
    """The importance-sampling exponent: `start` at the first update, linearly to 1 at
    `anneal_updates` (Schaul et al. anneal it to 1 by the end of training)."""

    start: float
    anneal_updates: int
    samples_per_update: int

    def at(self, samples: int) -> float:
        """Beta after `samples` sampled transitions."""
        progress = min(1.0, samples / (self.samples_per_update * max(1, self.anneal_updates)))
        return self.start + (1.0 - self.start) * progress


class ShardMixer:
    """Keeps the latest counters of every shard and picks shards for sample requests."""

    def __init__(self, num_shards: int, micro_batch: int, limiter: SamplesPerInsertLimiter, seed: int,
                 beta: BetaSchedule | None = None):
        self.micro_batch = micro_batch
        self.beta_schedule = beta  # None: uniform replay
        self.masses = np.zeros(num_shards, np.float64)  # each shard's total priority mass
        self.min_masses = np.full(num_shards, np.inf)
        self.revisions = np.full(num_shards, -1, np.int64)
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
        self.masses, self.min_masses, self.revisions = self.masses.copy(), self.min_masses.copy(), self.revisions.copy()
        self.inserted = self.inserted.copy()
        self.inserted_before = self.inserted_before.copy()
        self.sampled_reported = self.sampled_reported.copy()

    def observe(self, counters: ShardCounters) -> None:
        """Record a shard's counters (they come back with every add, sample or poll).

        Replies can arrive out of order (a background refresh may land after a newer sample
        reply); both counters only ever grow within one shard process, so the larger value is the
        newer one. A shard that Ray restarted answers under a new incarnation from zero: its size
        starts again, the inserts of the process it replaced still count for the rate limit, and
        late replies of that process are ignored. Priority masses go up and down: the reply with
        the highest revision holds.
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
                self.masses[shard], self.min_masses[shard], self.revisions[shard] = 0.0, np.inf, -1
            self.incarnations[shard] = born
        if "revision" in counters and counters["revision"] >= self.revisions[shard]:
            self.revisions[shard] = counters["revision"]
            self.masses[shard], self.min_masses[shard] = counters["priority_mass"], counters["priority_min"]
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
        amounts = self.masses if self.beta_schedule is not None and self.masses.sum() > 0 else self.sizes
        return int(self.rng.choice(len(amounts), p=amounts / amounts.sum()))

    @property
    def beta(self) -> float | None:
        """The importance exponent now (None for uniform replay)."""
        if self.beta_schedule is None:
            return None
        return self.beta_schedule.at(self._inserted_and_sampled()[1])

    def priority_view(self, shard: int) -> PriorityView | None:
        """What shard `shard` needs to weigh its draws as one buffer of all shards would (None
        for uniform replay, or before any shard reported a mass)."""
        total = float(self.masses.sum())
        if self.beta_schedule is None or total <= 0:
            return None
        return {"share": float(self.masses[shard]) / total, "total": total, "min": float(self.min_masses.min()),
                "size": int(self.sizes.sum()), "beta": self.beta}

    def fleet_view(self, shard: int) -> FleetView | None:
        """What shard `shard` needs to limit its inserts by the global ratio (None while the
        limiter is off or the shard has not answered yet): an equal share of the fleet's insert
        room, so that the shards together never insert more than the whole room between views."""
        incarnation = self.incarnations[shard]
        if not self.limiter.enabled or incarnation is None:
            return None
        room = self.limiter.insert_room(*self._inserted_and_sampled(), int(self.sizes.sum()))
        return {"room": room / len(self.sizes), "inserted_seen": int(self.inserted[shard]),
                "incarnation": incarnation}

    def lost(self, micro_batches: int) -> None:
        """Requested micro-batches that never came (their shard died): they were not sampled."""
        self.requested -= micro_batches * self.micro_batch
