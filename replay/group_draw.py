"""One replay spread over a group of learners, drawn from exactly as if one learner held it all.

With several learners, each holds the shards of its own collectors (replay/sharded.py). For the
group's batch to be the batch one replay of every shard would draw, each update:

1. every learner tells the others its ReplayShare (one small all-gather);
2. every learner splits the batch among the learners with the same multinomial draw over their
   masses (`split_batch`), from a generator seeded alike on each, so all agree with no other
   message;
3. each draws its part from its own shards, the importance weights figured with the whole group's
   mass, size and smallest priority (`GroupFigures`, given to ShardedReplay.draw).

Why that is exact: one replay's draw of n transitions is n independent picks, each landing on a
learner with probability that learner's share of the mass (uniform replay: of the sampleable
slots; prioritized: of the priority mass); the counts per learner are then multinomial, and given
them each pick is its learner's own law. Drawing the counts first and then the picks inside each
learner is the same law, pick by pick.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ReplayShare:
    """What one learner's replay can be drawn from now (ShardedReplay.share)."""

    mass: float  # uniform: its sampleable slots; prioritized: the sum of its priority masses
    size: int  # its sampleable slots
    min_positive: float  # prioritized: its smallest positive mass (inf: none, or uniform replay)
    sampled: int  # transitions drawn from it so far (prioritized replay's beta counts the group's)

    def as_array(self) -> np.ndarray:
        """Float64 [4], for a collective that gathers one tensor per learner."""
        return np.array([self.mass, self.size, self.min_positive, self.sampled], np.float64)

    @classmethod
    def from_array(cls, values) -> ReplayShare:
        mass, size, min_positive, sampled = (float(v) for v in values)
        return cls(mass, int(size), min_positive, int(sampled))


@dataclass(frozen=True)
class GroupFigures:
    """The whole group's figures a prioritized draw weighs by: those of one replay of every shard."""

    mass: float
    size: int
    min_positive: float
    sampled: int


@dataclass(frozen=True)
class OtherLearners:
    """What the other learners of a group held and had done when last heard from (each update's
    all-gather): with its own counts, a learner's replay figures the group's insert room, so that
    the replay ratio holds for the group as configured, not N times looser."""

    inserted: int  # env steps inserted into their shards
    sampled: int  # transitions drawn from them
    held: int  # env steps held in them now
    shards: int  # how many shards they hold (one per collector)


def group_figures(shares: list[ReplayShare]) -> GroupFigures:
    """The group's figures from every learner's share."""
    return GroupFigures(sum(s.mass for s in shares), sum(s.size for s in shares),
                        min(s.min_positive for s in shares), sum(s.sampled for s in shares))


def split_batch(shares: list[ReplayShare], count: int, rng: np.random.Generator) -> np.ndarray:
    """How many of the batch's `count` transitions each learner draws: multinomial in the learners'
    shares of the mass. Every learner calls this with the same shares and a generator in the same
    state, and gets the same split."""
    masses = np.array([s.mass for s in shares], np.float64)
    total = masses.sum()
    if total <= 0:
        raise ValueError("no learner of the group holds a transition to draw")
    return rng.multinomial(count, masses / total)
