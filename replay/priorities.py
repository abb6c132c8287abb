"""Prioritized replay inside one shard: the priority of every slot, and what a sample weighs.

Prioritized experience replay (Schaul et al. 2016, as Ape-X uses it) stores each transition with
the mass p = (|TD error| + epsilon)^alpha and draws it with probability P(i) = p_i / sum_j p_j.
`PriorityIndex` keeps those masses in a SumTree over the shard's slots, plus a *stamp* per slot:
the ordinal of the transition the slot holds (the shard's insert count when it arrived). A
priority update names the slots and stamps it was sampled with, so one for a slot that has been
overwritten since (another stamp now) is dropped instead of landing on the new transition.

Across shards the sampling stays exact (replay/mixing.py): the learner draws each micro-batch's
shard with probability share_s = mass_s / mass_total, the shard draws inside itself with
p_i / mass_s, and the importance weight uses the global figures the learner sent with the request
(a `PriorityView`), so the mixed batch has the probabilities and weights of one buffer holding
every shard's data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replay.contracts import PriorityView
from replay.sum_tree import SumTree

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

    def __init__(self, capacity: int, settings: PrioritySettings):
        self.settings = settings
        self.tree = SumTree(capacity)
        self.stamps = np.full(capacity, -1, np.int64)  # -1: the slot holds no transition
        self.max_mass = 1.0  # new transitions' mass under initial="max" (Schaul et al. start at 1)
        self.updates_applied = 0
        self.updates_dropped = 0

    def mass(self, td_abs: np.ndarray) -> np.ndarray:
        """(|TD error| + epsilon)^alpha."""
        return (np.abs(np.asarray(td_abs, np.float64)) + self.settings.epsilon) ** self.settings.alpha

    @property
    def total(self) -> float:
        """The shard's total mass."""
        return self.tree.total

    @property
    def min_mass(self) -> float:
        """The smallest positive mass held (inf when none)."""
        return self.tree.min_positive

    def place(self, placement: Placement, first_stamp: int, td_abs: np.ndarray | None) -> None:
        """Record a stored chunk: its transition k gets stamp first_stamp + k and the mass of its
        |TD error| (`td_abs`, one per chunk transition), or the largest mass seen when None."""
        self.tree.update(placement.cleared, np.zeros(len(placement.cleared)))
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
            self.tree.update(slots, masses)
            self.max_mass = max(self.max_mass, float(masses.max()))

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """`count` independent draws, each slot with probability mass / total (exactly, so a batch
        mixed across shards has one buffer's law)."""
        total = self.tree.total
        return self.tree.find(np.minimum(rng.random(count) * total, np.nextafter(total, 0.0)))

    def weights(self, slots: np.ndarray, view: PriorityView | None, size: int) -> np.ndarray:
        """Importance weights of drawn `slots`. With the learner's `view`, P(i) = share * mass_i /
        this shard's total and the normalisation is the global one; without (a single shard, or no
        view yet) this shard is the whole replay."""
        total = self.tree.total
        if view is None:
            view = {"share": 1.0, "total": total, "min": self.min_mass, "size": size, "beta": 1.0}
        probabilities = view["share"] * self.tree.get(slots) / total
        return importance_weights(probabilities, view["min"] / view["total"], view["size"], view["beta"])

    def reset_to_max(self, slots: np.ndarray, first_stamp: int) -> None:
        """Give `slots` (restored without priorities) the largest mass and unique stamps below
        `first_stamp`, the next new transition's."""
        self.tree.update(np.arange(self.tree.capacity), np.zeros(self.tree.capacity))
        self.stamps.fill(-1)
        self._set(slots, np.full(len(slots), self.max_mass))
        self.stamps[slots] = first_stamp - 1 - np.arange(len(slots))

    def get_state(self) -> dict:
        """Masses, stamps and the largest mass, for a replay checkpoint."""
        return {"masses": self.tree.get(np.arange(self.tree.capacity)).astype(np.float32),
                "stamps": self.stamps.copy(), "max_mass": self.max_mass}

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output (same capacity)."""
        self.tree.update(np.arange(self.tree.capacity), state["masses"].astype(np.float64))
        self.stamps[...] = state["stamps"]
        self.max_mass = state["max_mass"]
