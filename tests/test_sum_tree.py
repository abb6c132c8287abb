"""The prioritized-replay sum tree against brute force (numpy cumulative sums), under random
batched updates."""

import numpy as np
import pytest

from replay.sum_tree import SumTree


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
        assert (truth[tree.sample(300, rng)] > 0).all()  # a slot without mass is never drawn


def test_sampling_follows_the_priorities():
    rng = np.random.default_rng(0)
    tree = SumTree(5)
    priorities = np.array([1.0, 0.0, 3.0, 6.0, 0.0])
    tree.update(np.arange(5), priorities)
    counts = np.bincount(tree.sample(100_000, rng), minlength=5)
    assert counts[1] == counts[4] == 0
    assert counts / counts.sum() == pytest.approx(priorities / priorities.sum(), abs=0.002)  # stratified: tight


def test_bad_priorities_are_refused():
    tree = SumTree(4)
    for bad in (-1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="finite and >= 0"):
            tree.update(np.array([0]), np.array([bad]))
    with pytest.raises(ValueError, match="no slot has a positive priority"):
        tree.sample(1, np.random.default_rng(0))


def test_importance_weights_against_a_hand_computed_table():
    from replay.sum_tree import importance_weights

    # replay of N=4 with priorities 1, 2, 3, 4 (total 10, smallest 1), beta 0.5:
    # P = .1 .2 .3 .4; (N P)^-0.5 = 1.5811 1.1180 0.9129 0.7906; divided by the largest (1.5811)
    weights = importance_weights(np.array([1.0, 2.0, 3.0, 4.0]), 10.0, 1.0, 4, 0.5)
    assert weights == pytest.approx([1.0, 0.70711, 0.57735, 0.5], abs=1e-5)
    # the same slots drawn from two shards of a bigger replay: global N, mass and minimum decide
    assert importance_weights(np.array([2.0]), 20.0, 0.5, 10, 1.0) == pytest.approx([0.25])
    assert (importance_weights(np.array([1.0, 4.0]), 10.0, 1.0, 4, 0.0) == 1.0).all()  # beta 0: no correction
