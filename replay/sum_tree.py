"""SumTree: priorities of a replay shard's slots, for proportional sampling (prioritized replay).

A complete binary tree over a power-of-two number of leaves, one leaf per slot, each inner node
the sum of its children, so the total is the root and a prefix sum is found in log2(leaves)
steps. A second tree of minima gives the smallest positive priority (importance weights are
normalised by the largest weight, which the smallest probability sets).

Everything is batched: `update` writes many leaves and rebuilds only their ancestors level by
level, and `find` descends for many prefix sums at once; no Python loop runs per element, only
per tree level (17 levels for a million slots). A slot with priority 0 (empty, overwritten, or a
frame slot that cannot be sampled) has no mass and is never found.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """Priorities of `capacity` slots: batched updates, prefix-sum search, total and minimum."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("a sum tree needs at least one slot")
        self.capacity = capacity
        self.leaves = 1 << max(capacity - 1, 1).bit_length()  # a power of two >= capacity
        self.depth = self.leaves.bit_length() - 1
        self.sums = np.zeros(2 * self.leaves, np.float64)
        self.mins = np.full(2 * self.leaves, np.inf)  # inf: no positive priority below this node

    @property
    def total(self) -> float:
        """The sum of every slot's priority."""
        return float(self.sums[1])

    @property
    def min_positive(self) -> float:
        """The smallest positive priority (inf when every slot is 0)."""
        return float(self.mins[1])

    def get(self, slots: np.ndarray) -> np.ndarray:
        """The priorities of `slots`."""
        return self.sums[self.leaves + np.asarray(slots)]

    def update(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of `slots` (for a slot given twice, the last value holds)."""
        slots = np.asarray(slots, np.int64)
        priorities = np.asarray(priorities, np.float64)
        if slots.size == 0:
            return
        if (priorities < 0).any() or not np.isfinite(priorities).all():
            raise ValueError("priorities must be finite and >= 0")
        nodes = self.leaves + slots
        self.sums[nodes] = priorities
        self.mins[nodes] = np.where(priorities > 0, priorities, np.inf)
        # Parents of sorted nodes stay sorted, so one sort serves every level and each level drops
        # its repeats with one comparison (np.unique would sort again at every level).
        nodes = np.sort(nodes) // 2
        while True:
            nodes = nodes[np.concatenate(([True], nodes[1:] != nodes[:-1]))]
            self.sums[nodes] = self.sums[2 * nodes] + self.sums[2 * nodes + 1]
            self.mins[nodes] = np.minimum(self.mins[2 * nodes], self.mins[2 * nodes + 1])
            if nodes[0] == 1:
                break
            nodes //= 2

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """For each value v in [0, total), the slot i whose priority interval holds it:
        sum(priorities[:i]) <= v < sum(priorities[:i+1]). Only slots with mass are returned."""
        values = np.asarray(prefix_sums, np.float64).copy()
        nodes = np.ones(values.shape, np.int64)
        for _ in range(self.depth):
            left = 2 * nodes
            left_mass = self.sums[left]
            # Right when v passes the left child's mass, or when rounding left v at the edge of a
            # left child with no mass; never into a right child that has none.
            go_right = ((values >= left_mass) | (left_mass <= 0)) & (self.sums[left + 1] > 0)
            values -= np.where(go_right, left_mass, 0.0)
            nodes = left + go_right
        return nodes - self.leaves
