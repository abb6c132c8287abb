"""The prioritized-replay sum tree against brute force (numpy cumulative sums), under random
batched updates."""

import numpy as np
import pytest

from raypex.replay.sum_tree import SumTree


@pytest.mark.parametrize("capacity", [1, 2, 7, 64, 1000])
def test_totals_minima_and_prefix_search_match_brute_force_under_random_updates(capacity):
    rng = np.random.default_rng(capacity)
    tree, truth = SumTree(capacity), np.zeros(capacity)
    for _ in range(50):
        slots = rng.integers(0, capacity, rng.integers(1, 2 * capacity + 1))
        priorities = rng.random(len(slots)) * (rng.random(len(slots)) < 0.8)  # some zeros: no mass
        tree.update(slots, priorities)
        truth[slots] = priorities  # numpy's fancy assignment: the last write of a slot holds, as in the tree
        assert tree.total == pytest.approx(truth.sum())
        positive = truth[truth > 0]
        assert tree.min_positive == (positive.min() if positive.size else np.inf)
        assert (tree.get(np.arange(capacity)) == truth).all()
        if truth.sum() == 0:
            continue
        values = rng.random(200) * truth.sum()
        found = tree.find(values)
        edges = np.concatenate([[0.0], np.cumsum(truth)])
        expected = np.searchsorted(edges, values, side="right") - 1
        assert (found == expected).all()
        assert (truth[found] > 0).all()  # a slot without mass is never found


def test_bad_priorities_are_refused():
    tree = SumTree(4)
    for bad in (-1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="finite and >= 0"):
            tree.update(np.array([0]), np.array([bad]))
