"""A replay spread over two learners (replay/group_draw.py) against the exact law of one replay of
every shard: which transitions are drawn (chi-square over every stored one) and, prioritized, the
importance weights. Two ShardedReplay objects stand for the two learners' processes; what they
would all-gather is handed over as a list."""

import numpy as np
import pytest

from raypex.replay.group_draw import ReplayShare, group_figures, split_batch
from raypex.replay.priorities import BetaSchedule, PrioritySettings, importance_weights
from raypex.replay.shard import StorageSpec
from raypex.replay.sharded import ShardedReplay
from tests.test_priorities import UNLIMITED, chi_square, chi_square_critical, chunk

CAPACITIES = ((20, 10), (30,))  # learner 0 holds two shards, learner 1 one
STORED = 60
UPDATES, BATCH = 1_000, 64


def filled_learners(prioritized: bool) -> list[ShardedReplay]:
    """Two learners' replays whose transitions are named 0..59 in order (obs[0]), prioritized ones
    with masses of different scales per shard."""
    rng = np.random.default_rng(0)
    learners, start = [], 0
    for i, capacities in enumerate(CAPACITIES):
        # beta 0.4 throughout: annealed over more samples than the test draws by far
        priorities = (PrioritySettings(alpha=0.6, epsilon=1e-6), BetaSchedule(0.4, 10**15, 1)) if prioritized else ()
        learner = ShardedReplay(len(capacities), StorageSpec(max(capacities), (2,), "float32"), UNLIMITED, 10 + i,
                                *priorities)
        for shard, capacity in enumerate(capacities):
            scale = (1.0, 3.0, 0.5)[start // 20] if prioritized else 1.0
            learner.add(shard, chunk(start, capacity, scale * rng.random(capacity) if prioritized else None))
            start += capacity
        learners.append(learner)
    return learners


def group_draws(learners: list[ShardedReplay]) -> tuple[np.ndarray, np.ndarray | None]:
    """UPDATES batches drawn by the group as the learners would: shares gathered, the batch split
    alike on each (one generator per learner, seeded alike), each drawing its part. Returns the
    names of the drawn transitions and, prioritized, their weights."""
    splitters = [np.random.default_rng(7) for _ in learners]
    names, weights = [], []
    for _ in range(UPDATES):
        shares = [ReplayShare.from_array(learner.share().as_array()) for learner in learners]  # the all-gather
        splits = [split_batch(shares, BATCH, rng) for rng in splitters]
        assert all((split == splits[0]).all() for split in splits)  # every learner agrees with no message
        figures = group_figures(shares)
        for learner, part in zip(learners, splits[0]):
            if part:
                draw = learner.draw(1, int(part), figures)
                names.append(learner.gather(draw)["obs"][..., 0].ravel())
                if draw.weight is not None:
                    weights.append(draw.weight.ravel())
    return np.concatenate(names).astype(np.int64), np.concatenate(weights) if weights else None


def test_two_learners_draw_uniformly_over_every_stored_transition():
    names, _ = group_draws(filled_learners(prioritized=False))
    counts = np.bincount(names, minlength=STORED)
    uniform = np.full(STORED, 1 / STORED)
    assert chi_square(counts, uniform) < chi_square_critical(STORED - 1)
    # the test can tell: learner 1's transitions drawn 10% more often fails
    wrong = uniform.copy()
    wrong[30:] *= 1.10
    assert chi_square(counts, wrong / wrong.sum()) > chi_square_critical(STORED - 1)


def test_two_learners_draw_and_weigh_as_one_prioritized_replay_of_every_shard():
    learners = filled_learners(prioritized=True)
    masses = np.concatenate([s.priorities.masses()[:c] for learner, capacities in zip(learners, CAPACITIES)
                             for s, c in zip(learner.shards, capacities)])
    probabilities = masses / masses.sum()
    names, weights = group_draws(learners)
    counts = np.bincount(names, minlength=STORED)
    assert chi_square(counts, probabilities) < chi_square_critical(STORED - 1)
    wrong = probabilities.copy()
    wrong[30:] *= 1.10
    assert chi_square(counts, wrong / wrong.sum()) > chi_square_critical(STORED - 1)
    # each weight is the one replay's (N P(i))^-beta / max over all 60, not its own learner's
    assert weights == pytest.approx(importance_weights(probabilities[names], probabilities.min(), STORED, 0.4), rel=1e-5)
    own = importance_weights(probabilities[names] * masses.sum() / masses[30:].sum(),
                             probabilities[30:].min() * masses.sum() / masses[30:].sum(), 30, 0.4)
    assert not np.allclose(weights[names >= 30], own[names >= 30], rtol=1e-3)  # the test can tell


def test_a_group_with_nothing_to_draw_says_so():
    empty = ReplayShare(0.0, 0, float("inf"), 0)
    with pytest.raises(ValueError, match="no learner of the group holds a transition"):
        split_batch([empty, empty], BATCH, np.random.default_rng(0))
