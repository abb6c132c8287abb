"""Prioritized replay inside one shard: the priority of every slot, and what a sample weighs.

Prioritized experience replay (Schaul et al. 2016, as Ape-X uses it) stores each transition with
the mass p = (|TD error| + epsilon)^alpha and draws it with probability P(i) = p_i / sum_j p_j.
`PriorityIndex` keeps those masses in a SumTree over the shard's slots, plus a *stamp* per slot:
the ordinal of the transition the slot holds (the shard's insert count when it arrived). A
priority update names the slots and stamps it was sampled with, so one for a slot that has been
overwritten since (another stamp now) is dropped instead of landing on the new transition.

Across shards the sampling stays exact (replay/sharded.py): each transition's shard is drawn with
probability mass_s / mass_total and its slot inside the shard with p_i / mass_s, and the
importance weights use the figures of all shards, so the mixed batch has the probabilities and
weights of one buffer holding every shard's data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raypex.replay.sum_tree import SumTree

INITIAL_PRIORITIES = ("td", "max")


@dataclass(frozen=True)
class PrioritySettings:
    """How |TD errors| become masses, and what a new transition starts with."""

    alpha: float = 0.6  # 0: uniform; 1: fully proportional
    epsilon: float = 1e-6  # added to |TD error|: every stored transition keeps some mass
    initial: str = "td"  # td: the collector's |TD error| sent with the chunk; max: the largest mass seen

    def __post_init__(self):
        if self.alpha < 0 or self.epsilon <= 0 or self.initial not in INITIAL_PRIORITIES:
            raise ValueError(f"priority settings: alpha >= 0, epsilon > 0, initial one of {INITIAL_PRIORITIES}; "
                             f"got {self.alpha}, {self.epsilon}, {self.initial!r}")


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


@dataclass(frozen=True)
class Placement:
    """Where a storage put a chunk: `rows[k]` holds chunk transition `kept[k]`; `cleared` slots
    lost their transition and hold none now (overwritten frames, stacks cut by the write position)."""

    rows: np.ndarray
    kept: np.ndarray
    cleared: np.ndarray


def importance_weights(probabilities: np.ndarray, min_probability: float, size: int, beta: float) -> np.ndarray:
    """(N * P(i))^-beta normalised by the largest weight, (N * P_min)^-beta: the weights one
    prioritized buffer of N transitions gives draws of probability P(i)."""
    largest = (size * min_probability) ** -beta
    return (size * np.asarray(probabilities, np.float64)) ** -beta / largest


class PriorityIndex:
    """Masses and stamps of a shard's slots: store, clear, update (stale ones dropped), sample."""

    def __init__(self, capacity: int, settings: PrioritySettings, tree: SumTree | None = None, offset: int = 0,
                 stamps: np.ndarray | None = None):
        """With `tree`, this shard's slots are leaves offset..offset+capacity-1 of a tree every
        shard of a replay shares (replay/sharded.py: one find per draw, one update per learner
        update), and `stamps` its part of the replay's stamps; without, its own."""
        self.settings = settings
        self.capacity = capacity
        self.tree = tree if tree is not None else SumTree(capacity)
        self.offset = offset
        self.stamps = stamps if stamps is not None else np.full(capacity, -1, np.int64)  # -1: no transition
        self.stamps.fill(-1)
        self.max_mass = 1.0  # new transitions' mass under initial="max" (Schaul et al. start at 1)
        self.updates_applied = 0
        self.updates_dropped = 0

    def mass(self, td_abs: np.ndarray) -> np.ndarray:
        """(|TD error| + epsilon)^alpha."""
        return (np.abs(np.asarray(td_abs, np.float64)) + self.settings.epsilon) ** self.settings.alpha

    @property
    def _own_tree(self) -> bool:
        return self.offset == 0 and self.tree.capacity == self.capacity

    def masses(self) -> np.ndarray:
        """Every slot's mass."""
        return self.tree.get(self.offset + np.arange(self.capacity))

    @property
    def total(self) -> float:
        """The shard's total mass."""
        return self.tree.total if self._own_tree else float(self.masses().sum())

    def place(self, placement: Placement, first_stamp: int, td_abs: np.ndarray | None) -> None:
        """Record a stored chunk: its transition k gets stamp first_stamp + k and the mass of its
        |TD error| (`td_abs`, one per chunk transition), or the largest mass seen when None."""
        self.tree.update(self.offset + placement.cleared, np.zeros(len(placement.cleared)))
        self.stamps[placement.cleared] = -1
        kept = np.asarray(placement.kept, np.int64)
        if td_abs is None or self.settings.initial == "max":
            masses = np.full(len(kept), self.max_mass)
        else:
            masses = self.mass(np.asarray(td_abs)[kept])
        self._set(placement.rows, masses)
        self.stamps[placement.rows] = first_stamp + kept

    def update(self, slots: np.ndarray, stamps: np.ndarray, td_abs: np.ndarray) -> int:
        """New |TD errors| for sampled slots; those whose slot holds another transition now (its
        stamp changed) are dropped. Returns how many were applied."""
        slots = np.asarray(slots, np.int64)
        current = self.stamps[slots] == np.asarray(stamps)
        self._set(slots[current], self.mass(np.asarray(td_abs)[current]))
        applied = int(current.sum())
        self.updates_applied += applied
        self.updates_dropped += len(slots) - applied
        return applied

    def _set(self, slots: np.ndarray, masses: np.ndarray) -> None:
        if len(masses):
            self.tree.update(self.offset + slots, masses)
            self.max_mass = max(self.max_mass, float(masses.max()))

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """`count` independent draws, each slot with probability mass / total (a shard with its
        own tree; a replay's shards are drawn from together, replay/sharded.py)."""
        if not self._own_tree:
            raise ValueError("a shard of a shared tree is drawn from by its replay")
        total = self.tree.total
        return self.tree.find(np.minimum(rng.random(count) * total, np.nextafter(total, 0.0)))

    def reset_to_max(self, slots: np.ndarray, first_stamp: int) -> None:
        """Give `slots` (restored without priorities) the largest mass and unique stamps below
        `first_stamp`, the next new transition's."""
        self.tree.update(self.offset + np.arange(self.capacity), np.zeros(self.capacity))
        self.stamps.fill(-1)
        self._set(slots, np.full(len(slots), self.max_mass))
        self.stamps[slots] = first_stamp - 1 - np.arange(len(slots))

    def get_state(self) -> dict:
        """Masses, stamps and the largest mass, for a replay checkpoint."""
        return {"masses": self.masses().astype(np.float32), "stamps": self.stamps.copy(), "max_mass": self.max_mass}

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output (same capacity)."""
        self.tree.update(self.offset + np.arange(self.capacity), state["masses"].astype(np.float64))
        self.stamps[...] = state["stamps"]
        self.max_mass = state["max_mass"]
