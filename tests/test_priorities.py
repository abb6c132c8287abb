"""Prioritized replay without Ray: shards' priority indexes, stale updates, importance weights, and
the replay's draws across shards against the exact law of one prioritized buffer of every shard."""

import numpy as np
import pytest

from raypex.replay.priorities import BetaSchedule, PrioritySettings, importance_weights
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.shard import ReplayShard, StorageSpec, build_storage
from raypex.replay.sharded import SampledKeys, ShardedReplay

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


def replay(capacities, settings: PrioritySettings = EXACT, seed: int = 0, beta: float = 1.0) -> ShardedReplay:
    """Shards of `capacities` (one replay's shards all have the largest; the others are filled to
    theirs), beta fixed at `beta`."""
    return ShardedReplay(len(capacities), StorageSpec(max(capacities), (2,), "float32"), UNLIMITED, seed, settings,
                         BetaSchedule(beta, 10**9, 1))


def shard(capacity: int, settings: PrioritySettings | None = EXACT) -> ReplayShard:
    return ReplayShard(0, build_storage(StorageSpec(capacity, (2,), "float32")), settings)


def keys(rows) -> SampledKeys:
    rows = np.asarray(rows)
    return SampledKeys(np.zeros_like(rows), rows, rows)


def test_importance_weights_against_a_hand_computed_table():
    # one buffer of N=4 with priorities 1, 2, 3, 4 (P = .1 .2 .3 .4), beta 0.5:
    # (N P)^-0.5 = 1.5811 1.1180 0.9129 0.7906, divided by the largest (of P_min = .1) 1.5811
    assert importance_weights(np.array([0.1, 0.2, 0.3, 0.4]), 0.1, 4, 0.5) == pytest.approx(
        [1.0, 0.70711, 0.57735, 0.5], abs=1e-5)
    assert importance_weights(np.array([0.1]), 0.025, 10, 1.0) == pytest.approx([0.25])
    # the same table from a replay holding those priorities, weighing its own draws
    four = replay([4], beta=0.5)
    four.add(0, chunk(0, 4, [1.0, 2.0, 3.0, 4.0]))
    draw = four.draw(1, 400)
    table = np.array([1.0, 0.70711, 0.57735, 0.5])
    assert draw.weight[0] == pytest.approx(table[draw.keys.row[0]], abs=1e-5)
    assert four.gather(draw)["return"][0] == pytest.approx(draw.keys.row[0])  # slot i holds transition i


def test_updates_for_overwritten_slots_are_dropped():
    ring = replay([4])
    ring.add(0, chunk(0, 4, [1.0, 1.0, 1.0, 1.0]))
    draw = ring.draw(1, 8)
    assert (draw.keys.stamp == draw.keys.row).all()  # the first four transitions: stamps 0..3 in slots 0..3
    ring.add(0, chunk(4, 2, [5.0, 5.0]))  # overwrites slots 0 and 1
    assert ring.update_priorities(keys([0, 1, 2, 3]), np.array([9.0, 9.0, 7.0, 7.0])) == 2
    index = ring.shards[0].priorities
    assert index.masses() == pytest.approx([5.0, 5.0, 7.0, 7.0])
    stats = ring.stats()[0]
    assert (stats.priorities.updates_applied, stats.priorities.updates_dropped) == (2, 2)
    assert stats.priorities.mass == pytest.approx(24.0) and stats.priorities.max_mass == pytest.approx(7.0)


def test_a_chunk_longer_than_the_ring_keeps_its_newest_priorities():
    ring = shard(3)
    ring.add(chunk(0, 5, [1.0, 2.0, 3.0, 4.0, 5.0]))  # transitions 2, 3, 4 survive, in slots 2, 0, 1
    assert ring.priorities.tree.get(np.arange(3)) == pytest.approx([4.0, 5.0, 3.0])
    np.testing.assert_array_equal(ring.priorities.stamps, [3, 4, 2])


def test_initial_max_priority_gives_new_transitions_the_largest_mass_seen():
    ring = replay([8], PrioritySettings(alpha=1.0, epsilon=1e-9, initial="max"))
    index = ring.shards[0].priorities
    ring.add(0, chunk(0, 2))  # no priorities sent: Schaul et al.'s start, 1
    ring.update_priorities(keys([0]), np.array([3.0]))
    ring.add(0, chunk(2, 1, [0.01]))  # sent ones are ignored under "max"
    assert index.masses()[:3] == pytest.approx([3.0, 1.0, 3.0])


def test_a_checkpoint_keeps_priorities_and_old_replay_comes_back_at_the_largest():
    ring = shard(6)
    ring.add(chunk(0, 5, [1.0, 2.0, 3.0, 4.0, 5.0]))
    state = ring.get_state()
    again = shard(6)
    again.set_state(state)
    assert again.priorities.tree.get(np.arange(6)) == pytest.approx(ring.priorities.tree.get(np.arange(6)))
    np.testing.assert_array_equal(again.priorities.stamps, ring.priorities.stamps)
    uniform = shard(6, None)
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


def test_three_shards_draw_and_weigh_exactly_as_one_prioritized_buffer():
    rng = np.random.default_rng(0)
    settings = PrioritySettings(alpha=0.6, epsilon=1e-6)
    capacities = (20, 10, 30)
    three = replay(capacities, settings, seed=3, beta=0.4)
    for i, (capacity, scale) in enumerate(zip(capacities, (1.0, 3.0, 0.5))):  # shards of different sizes and masses
        three.add(i, chunk(0, capacity, scale * rng.random(capacity)))
    masses = np.concatenate([s.priorities.masses()[:c] for s, c in zip(three.shards, capacities)])
    offsets = np.cumsum([0, *capacities[:-1]])
    probabilities = masses / masses.sum()

    # Each transition is drawn independently with P(slot) = mass / total mass of every shard: the
    # counts over all 60 stored transitions are chi-square with 59 degrees of freedom.
    draw = three.draw(40, 2_000)
    drawn = offsets[draw.keys.shard] + draw.keys.row
    counts = np.bincount(drawn.ravel(), minlength=60)
    assert chi_square(counts, probabilities) < chi_square_critical(59)
    # the test can tell: the law with one shard's share 10% off fails
    wrong = probabilities.copy()
    wrong[:20] *= 1.10
    assert chi_square(counts, wrong / wrong.sum()) > chi_square_critical(59)

    # each draw's importance weight is the one buffer's (N P(i))^-beta / max, beta 0.4
    expected = importance_weights(probabilities[drawn.ravel()], probabilities.min(), 60, 0.4)
    assert draw.weight.ravel() == pytest.approx(expected, rel=1e-5)
    assert draw.weight.max() <= 1.0 + 1e-6


def test_beta_anneals_to_one_over_its_updates():
    schedule = BetaSchedule(0.4, anneal_updates=100, samples_per_update=32)
    assert [schedule.at(n * 32) for n in (0, 50, 100, 1000)] == pytest.approx([0.4, 0.7, 1.0, 1.0])


@pytest.mark.parametrize("bad", [{"alpha": -0.1}, {"epsilon": 0.0}, {"initial": "median"}])
def test_bad_priority_settings_are_refused(bad):
    with pytest.raises(ValueError, match="priority settings"):
        PrioritySettings(**bad)
