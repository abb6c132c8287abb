"""Prioritized replay without Ray: shards' priority indexes, stale updates, importance weights, and
the mixer's draws across shards against the exact law of one prioritized buffer of every shard."""

import numpy as np
import pytest

from replay.mixing import BetaSchedule, ShardMixer
from replay.priorities import PrioritySettings, importance_weights
from replay.rate_limit import SamplesPerInsertLimiter
from replay.shard import ReplayShard, StorageSpec

UNLIMITED = SamplesPerInsertLimiter(0.0, 1, 1)
EXACT = PrioritySettings(alpha=1.0, epsilon=1e-9)  # mass = |TD error|: easy to compute by hand


def chunk(start: int, count: int, td_abs=None) -> dict:
    """`count` transitions whose obs[0] names them (start, start+1, ...), with priorities if given."""
    ids = np.arange(start, start + count, dtype=np.float32)
    out = {"obs": np.stack([ids, ids], 1), "action": np.zeros(count, np.int64), "return": ids.copy(),
           "discount": np.full(count, 0.9, np.float32), "next_obs": np.stack([ids, ids], 1)}
    if td_abs is not None:
        out["priority"] = np.asarray(td_abs, np.float32)
    return out


def shard(capacity: int, settings: PrioritySettings = EXACT, index: int = 0, seed: int = 0) -> ReplayShard:
    return ReplayShard(index, StorageSpec(capacity, (2,), "float32"), UNLIMITED, seed, settings)


def test_importance_weights_against_a_hand_computed_table():
    # one buffer of N=4 with priorities 1, 2, 3, 4 (P = .1 .2 .3 .4), beta 0.5:
    # (N P)^-0.5 = 1.5811 1.1180 0.9129 0.7906, divided by the largest (of P_min = .1) 1.5811
    assert importance_weights(np.array([0.1, 0.2, 0.3, 0.4]), 0.1, 4, 0.5) == pytest.approx(
        [1.0, 0.70711, 0.57735, 0.5], abs=1e-5)
    assert importance_weights(np.array([0.1]), 0.025, 10, 1.0) == pytest.approx([0.25])
    # the same table from a shard holding those priorities, weighing its own draws
    four = shard(4)
    four.add(chunk(0, 4, [1.0, 2.0, 3.0, 4.0]))
    batch, _ = four.sample(400, 1, None, {"share": 1.0, "total": 10.0, "min": 1.0, "size": 4, "beta": 0.5})
    table = np.array([1.0, 0.70711, 0.57735, 0.5])
    assert batch["weight"][0] == pytest.approx(table[batch["index"][0]], abs=1e-5)
    assert batch["return"][0] == pytest.approx(batch["index"][0])  # slot i holds transition i


def test_updates_for_overwritten_slots_or_another_shard_process_are_dropped():
    ring = shard(4)
    ring.add(chunk(0, 4, [1.0, 1.0, 1.0, 1.0]))
    batch, _ = ring.sample(8, 1)
    index, stamp = batch["index"][0], batch["stamp"][0]
    assert (stamp == index).all()  # the first four transitions: stamps 0..3 in slots 0..3
    ring.add(chunk(4, 2, [5.0, 5.0]))  # overwrites slots 0 and 1
    applied = ring.update_priorities(ring.incarnation, np.array([0, 1, 2, 3]), np.array([0, 1, 2, 3]),
                                     np.array([9.0, 9.0, 7.0, 7.0]))
    assert applied == 2
    assert ring.priorities.tree.get(np.arange(4)) == pytest.approx([5.0, 5.0, 7.0, 7.0])
    assert ring.update_priorities("another-process", np.array([2]), np.array([2]), np.array([100.0])) == 0
    assert ring.priorities.tree.get(np.array([2])) == pytest.approx([7.0])
    stats = ring.stats()
    assert (stats["priority_updates_applied"], stats["priority_updates_dropped"]) == (2, 3)
    assert stats["priority_mass"] == pytest.approx(24.0) and stats["priority_max"] == pytest.approx(7.0)


def test_a_chunk_longer_than_the_ring_keeps_its_newest_priorities():
    ring = shard(3)
    ring.add(chunk(0, 5, [1.0, 2.0, 3.0, 4.0, 5.0]))  # transitions 2, 3, 4 survive, in slots 2, 0, 1
    assert ring.priorities.tree.get(np.arange(3)) == pytest.approx([4.0, 5.0, 3.0])
    np.testing.assert_array_equal(ring.priorities.stamps, [3, 4, 2])


def test_initial_max_priority_gives_new_transitions_the_largest_mass_seen():
    ring = shard(8, PrioritySettings(alpha=1.0, epsilon=1e-9, initial="max"))
    index = ring.priorities
    ring.add(chunk(0, 2))  # no priorities sent: Schaul et al.'s start, 1
    ring.update_priorities(ring.incarnation, np.array([0]), np.array([0]), np.array([3.0]))
    ring.add(chunk(2, 1, [0.01]))  # sent ones are ignored under "max"
    assert index.tree.get(np.arange(3)) == pytest.approx([3.0, 1.0, 3.0])


def test_a_checkpoint_keeps_priorities_and_old_replay_comes_back_at_the_largest():
    ring = shard(6)
    ring.add(chunk(0, 5, [1.0, 2.0, 3.0, 4.0, 5.0]))
    state = ring.get_state()
    again = shard(6, index=0, seed=1)
    again.set_state(state)
    assert again.priorities.tree.get(np.arange(6)) == pytest.approx(ring.priorities.tree.get(np.arange(6)))
    np.testing.assert_array_equal(again.priorities.stamps, ring.priorities.stamps)
    uniform = ReplayShard(0, StorageSpec(6, (2,), "float32"), UNLIMITED, 0)
    uniform.add(chunk(0, 5))
    turned_on = shard(6)
    turned_on.set_state(uniform.get_state())  # a run resumed with prioritized replay turned on
    assert turned_on.priorities.tree.get(np.arange(6)) == pytest.approx([1, 1, 1, 1, 1, 0])
    turned_on.add(chunk(5, 1, [2.0]))
    assert len(set(turned_on.priorities.stamps.tolist())) == 6  # every stored transition its own stamp


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = counts.sum() * probabilities
    return float(((counts - expected) ** 2 / expected).sum())


def chi_square_critical(df: int, z: float = 3.0902) -> float:
    """The chi-square quantile at 1 - 0.001 (z: the normal one), Wilson-Hilferty's approximation."""
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


def mixed_draws(shards: list[ReplayShard], share_error: float = 0.0, micro_batch: int = 8,
                draws: int = 40_000) -> tuple[np.ndarray, list[np.ndarray], list[tuple[int, np.ndarray, np.ndarray]]]:
    """Over `draws` micro-batches the mixer spreads across the shards: how many each shard served,
    how often each of its slots was drawn, and the first batches; `share_error` inflates shard 0's
    mass in the mixer's view (a mixer that gets one shard's share wrong)."""
    mixer = ShardMixer(len(shards), micro_batch, UNLIMITED, seed=3, beta=BetaSchedule(0.4, 10**9, micro_batch))  # beta stays 0.4
    for s in shards:
        mixer.observe(s.counters())
    mixer.masses[0] *= 1 + share_error
    served = np.zeros(len(shards), np.int64)
    slots = [np.zeros(s.storage.capacity, np.int64) for s in shards]
    batches = []
    for _ in range(draws):
        i = mixer.next_shard()
        batch, _ = shards[i].sample(micro_batch, 1, None, mixer.priority_view(i))
        served[i] += 1
        np.add.at(slots[i], batch["index"][0], 1)
        if len(batches) < 50:
            batches.append((i, batch["index"][0], batch["weight"][0]))
    return served, slots, batches


def test_three_shards_draw_and_weigh_exactly_as_one_prioritized_buffer():
    rng = np.random.default_rng(0)
    settings = PrioritySettings(alpha=0.6, epsilon=1e-6)
    shards = [shard(capacity, settings, index=i, seed=i) for i, capacity in enumerate((20, 10, 30))]
    for s, scale in zip(shards, (1.0, 3.0, 0.5)):  # three shards of different sizes and masses
        s.add(chunk(0, s.storage.capacity, scale * rng.random(s.storage.capacity)))
    masses = [s.priorities.tree.get(np.arange(s.storage.capacity)) for s in shards]
    total = sum(m.sum() for m in masses)
    shares = np.array([m.sum() for m in masses]) / total

    # P(slot) = P(shard) P(slot | shard): the statistic splits into one over the shards each
    # micro-batch came from (its draws are independent) plus one per shard over the slots drawn
    # in it (independent given the shard), chi-square with 2 + 19 + 9 + 29 = 59 degrees of freedom.
    served, slots, batches = mixed_draws(shards)
    between = chi_square(served, shares)
    within = sum(chi_square(counts, m / m.sum()) for counts, m in zip(slots, masses))
    assert between + within < chi_square_critical(59)
    # the draws can tell: a mixer 10% wrong about one shard's share fails
    wrong, _, _ = mixed_draws(shards, share_error=0.10)
    assert between < chi_square_critical(2) < chi_square(wrong, shares)

    # each draw's importance weight is the one buffer's (N P(i))^-beta / max, beta at its start
    probabilities = np.concatenate(masses) / total
    offsets = np.cumsum([0, 20, 10])
    for i, drawn, weights in batches:
        expected = importance_weights(probabilities[offsets[i] + drawn], probabilities.min(), 60, 0.4)
        assert weights == pytest.approx(expected, rel=1e-5)
    assert max(w.max() for _, _, w in batches) <= 1.0 + 1e-6


def test_beta_anneals_to_one_over_its_updates():
    schedule = BetaSchedule(0.4, anneal_updates=100, samples_per_update=32)
    assert [schedule.at(n * 32) for n in (0, 50, 100, 1000)] == pytest.approx([0.4, 0.7, 1.0, 1.0])


@pytest.mark.parametrize("bad", [{"alpha": -0.1}, {"epsilon": 0.0}, {"initial": "median"}])
def test_bad_priority_settings_are_refused(bad):
    with pytest.raises(ValueError, match="priority settings"):
        PrioritySettings(**bad)
