"""RingStorage, the samples-per-insert limiter, the shard and the shard mixer (no Ray)."""

from collections.abc import Callable

import numpy as np
import pytest

from replay.contracts import BATCH_FIELDS
from replay.mixing import ShardMixer
from replay.rate_limit import SamplesPerInsertLimiter
from replay.ring import RingStorage, transition_layout
from replay.shard import ReplayShard, ShardEmpty, StorageSpec


def chunk(start: int, count: int) -> dict:
    """Transitions whose every field encodes their insertion number."""
    ids = np.arange(start, start + count)
    return {
        "obs": np.stack([ids, -ids], axis=1).astype(np.float32),
        "action": ids.astype(np.int64),
        "return": ids.astype(np.float32),
        "discount": np.full(count, 0.5, np.float32),
        "next_obs": np.stack([ids + 1, -ids], axis=1).astype(np.float32),
    }


def storage(capacity: int) -> RingStorage:
    return RingStorage(capacity, transition_layout((2,), "float32"))


def test_fills_then_wraps_overwriting_oldest():
    ring = storage(5)
    ring.add(chunk(0, 3))
    assert (ring.size, ring.cursor) == (3, 3)
    rows = ring.add(chunk(3, 4)).rows  # 3,4 go to rows 3,4; 5,6 wrap to rows 0,1
    assert rows.tolist() == [3, 4, 0, 1]
    assert (ring.size, ring.cursor) == (5, 2)
    assert ring.columns["action"].tolist() == [5, 6, 2, 3, 4]
    assert ring.columns["next_obs"][:, 0].tolist() == [6, 7, 3, 4, 5]
    ring.check_invariants()


def test_chunk_larger_than_capacity_keeps_newest():
    ring = storage(4)
    ring.add(chunk(0, 1))
    ring.add(chunk(1, 10))  # ids 1..10, only 7..10 survive
    assert sorted(ring.columns["action"].tolist()) == [7, 8, 9, 10]
    assert ring.total_added == 11 and ring.size == 4
    ring.check_invariants()


def test_storage_is_allocated_once_at_capacity():
    ring = storage(1000)
    before = {k: v.ctypes.data for k, v in ring.columns.items()}
    nbytes = ring.nbytes
    for i in range(30):
        ring.add(chunk(i * 100, 100))
    assert {k: v.ctypes.data for k, v in ring.columns.items()} == before
    assert ring.nbytes == nbytes == 1000 * (2 * 4 + 8 + 4 + 4 + 2 * 4)


def test_sampling_stays_within_stored_rows():
    ring = storage(100)
    ring.add(chunk(0, 7))
    rng = np.random.default_rng(0)
    rows = ring.sample_rows(5000, rng)
    assert rows.min() >= 0 and rows.max() <= 6
    assert set(rows.tolist()) == set(range(7))  # every stored row reachable
    batch = ring.gather(rows)
    assert np.array_equal(batch["action"], rows)  # row i holds id i before wrapping
    with pytest.raises(ValueError):
        storage(3).sample_rows(1, rng)


def test_mismatched_chunk_lengths_are_rejected():
    bad = chunk(0, 3)
    bad["action"] = bad["action"][:2]
    with pytest.raises(ValueError, match="different lengths"):
        storage(10).add(bad)


def test_state_roundtrip():
    ring = storage(6)
    ring.add(chunk(0, 9))
    other = storage(6)
    other.set_state(ring.get_state())
    assert (other.size, other.cursor, other.total_added) == (6, 3, 9)
    assert np.array_equal(other.columns["obs"], ring.columns["obs"])


def test_limiter_gates_inserts_and_samples():
    lim = SamplesPerInsertLimiter(samples_per_insert=4.0, min_size=100, error_buffer=10)
    assert lim.insert_room(inserted=0, sampled=0, size=0) == 110
    assert lim.insert_room(inserted=110, sampled=0, size=110) == 0
    assert lim.insert_room(inserted=110, sampled=40, size=110) == 10  # 40 samples buy 10 inserts
    # below min_size (inserts overwrote, or a shard came back empty) the shortfall may always go in
    assert lim.insert_room(inserted=110, sampled=0, size=70) == 30
    assert not lim.can_sample(size=99, inserted=99, sampled=0, count=1)
    assert lim.can_sample(size=100, inserted=100, sampled=0, count=40)
    # the learner may run error_buffer * spi samples ahead, no more
    assert lim.can_sample(size=100, inserted=100, sampled=0, count=40)
    assert not lim.can_sample(size=100, inserted=100, sampled=0, count=41)
    off = SamplesPerInsertLimiter(0.0, 100, 10)
    assert off.insert_room(10**9, 0, 0) == float("inf")
    assert off.can_sample(100, 100, 10**9, 10) and not off.can_sample(99, 99, 0, 1)


def test_shard_counts_and_returns_batches():
    shard = ReplayShard(3, StorageSpec(50, (2,), "float32"), SamplesPerInsertLimiter(1.0, 10, 5), seed=0)
    counters = shard.add(chunk(0, 12))
    incarnation = counters.pop("incarnation")
    assert counters == {"shard_id": 3, "size": 12, "inserted": 12, "sampled": 0, "insert_room": 3.0}
    again = ReplayShard(3, StorageSpec(50, (2,), "float32"), SamplesPerInsertLimiter(1.0, 10, 5), seed=0)
    assert len(incarnation) == 12 and again.incarnation != incarnation  # a new process, a new name
    batch, counters = shard.sample(4, num_batches=2)
    assert set(batch) == set(BATCH_FIELDS)  # nothing the learner does not read
    assert batch["obs"].shape == (2, 4, 2) and batch["obs"].dtype == np.float32
    # chunk() numbers transitions by their row: every field of a sampled row is that row's
    assert np.array_equal(batch["obs"][..., 0], batch["action"]) and (batch["action"] < 12).all()
    assert counters["sampled"] == 8 and counters["insert_room"] == 11.0


def test_mixer_picks_shards_in_proportion_to_size():
    mixer = ShardMixer(3, micro_batch=4, limiter=SamplesPerInsertLimiter(0.0, 10, 1), seed=1)
    assert mixer.next_shard() is None  # nothing stored yet
    for shard_id, size in enumerate([100, 300, 0]):
        mixer.observe({"shard_id": shard_id, "size": size, "inserted": size, "sampled": 0, "insert_room": 1.0})
    picks = np.array([mixer.next_shard() for _ in range(4000)])
    assert (picks == 2).sum() == 0
    assert 0.70 < (picks == 1).mean() < 0.80


def test_mixer_applies_the_global_ratio():
    mixer = ShardMixer(2, micro_batch=10, limiter=SamplesPerInsertLimiter(1.0, 20, 10), seed=0)
    for shard_id in range(2):
        mixer.observe({"shard_id": shard_id, "size": 10, "inserted": 10, "sampled": 0, "insert_room": 1.0})
    granted = 0
    while mixer.next_shard() is not None:
        granted += 1
    # diff = 20*1 - samples must stay >= (20-10)*1 = 10: one micro-batch of 10 then stop
    assert granted == 1
    mixer.observe({"shard_id": 0, "size": 30, "inserted": 30, "sampled": 0, "insert_room": 1.0})
    assert mixer.next_shard() is not None


def test_mixer_starts_a_restarted_shard_from_zero_and_ignores_its_predecessor():
    mixer = ShardMixer(2, micro_batch=4, limiter=SamplesPerInsertLimiter(0.0, 1, 1), seed=0)
    old = {"shard_id": 0, "size": 500, "inserted": 800, "sampled": 0, "insert_room": 0.0, "incarnation": "a"}
    new = {"shard_id": 0, "size": 20, "inserted": 20, "sampled": 0, "insert_room": 0.0, "incarnation": "b"}
    mixer.observe(old)
    mixer.observe(new)
    assert mixer.sizes[0] == 20 and mixer.inserted[0] == 20 and mixer.inserted_before[0] == 800
    mixer.observe(old)  # a late reply of the process that died
    assert mixer.sizes[0] == 20 and mixer.inserted[0] == 20 and mixer.inserted_before[0] == 800


def test_an_empty_shard_says_so_when_sampled():
    shard = ReplayShard(1, StorageSpec(50, (2,), "float32"), SamplesPerInsertLimiter(0.0, 10, 5), seed=0)
    with pytest.raises(ShardEmpty, match="shard 1 holds no transitions"):
        shard.sample(4)


def test_mixer_ignores_counters_older_than_ones_it_has_seen():
    mixer = ShardMixer(2, micro_batch=4, limiter=SamplesPerInsertLimiter(0.0, 1, 1), seed=0)
    newer = {"shard_id": 0, "size": 500, "inserted": 800, "sampled": 0, "insert_room": 0.0}
    stale = {"shard_id": 0, "size": 300, "inserted": 300, "sampled": 0, "insert_room": 0.0}
    mixer.observe(newer)
    mixer.observe(stale)
    assert mixer.sizes[0] == 500 and mixer.inserted[0] == 800


def _step_fleet(steps: int, num_shards: int, capacity: int, limiter: SamplesPerInsertLimiter,
                share: SamplesPerInsertLimiter, adds: Callable[[int, int], bool], micro_batch: int,
                chunk_size: int = 4, with_views: bool = True,
                restart_at: int | None = None) -> tuple[list[ReplayShard], ShardMixer, list[int]]:
    """`num_shards` shards of `capacity`, each gated by `share`, and the learner's mixer gated by
    `limiter`, stepped in turns as the Ray wiring runs them: collector i adds a chunk when
    `adds(i, step)` and its shard has room, the learner samples micro-batches while the mixer
    allows, polling every shard's counters (with the fleet view, or without it). At `restart_at`
    shard 1's process is replaced by an empty one (Ray restarted it, its data lost). Returns the
    shards, the mixer and the samples drawn before and after the restart."""
    shards = [ReplayShard(i, StorageSpec(capacity, (2,), "float32"), share, seed=i) for i in range(num_shards)]
    mixer = ShardMixer(num_shards, micro_batch=micro_batch, limiter=limiter, seed=0)
    sampled = [0, 0]
    for step in range(steps):
        if step == restart_at:
            shards[1] = ReplayShard(1, StorageSpec(capacity, (2,), "float32"), share, seed=9)
        for i, shard in enumerate(shards):
            if adds(i, step) and shard.counters()["insert_room"] > 0:
                shard.add(chunk(0, chunk_size))
        for i, shard in enumerate(shards):
            mixer.observe(shard.counters(mixer.fleet_view(i) if with_views else None))
        while (index := mixer.next_shard()) is not None:
            _, counters = shards[index].sample(micro_batch, 1, mixer.fleet_view(index) if with_views else None)
            mixer.observe(counters)
            sampled[restart_at is not None and step >= restart_at] += micro_batch
    return shards, mixer, sampled


def _run_fleet(steps: int, stalled: set[int], with_views: bool, spi: float = 2.0, chunk_size: int = 4):
    """Three shards whose `stalled` collectors stop inserting after 10 steps; returns the inserts,
    the samples and the learner's limiter."""
    limiter = SamplesPerInsertLimiter(spi, min_size=60, error_buffer=30)
    share = SamplesPerInsertLimiter(spi, min_size=20, error_buffer=10)  # each shard's third
    shards, _, sampled = _step_fleet(steps, 3, 1000, limiter, share, lambda i, step: i not in stalled or step < 10,
                                     micro_batch=8, chunk_size=chunk_size, with_views=with_views)
    return sum(s.storage.total_added for s in shards), sampled[0], limiter


def test_a_stalled_collector_does_not_stop_the_others_or_the_learner():
    """Collector 2 stops inserting after 10 steps. With the per-shard share of the limiter alone
    the other two soon run out of room while the learner waits for inserts: the whole run stalls.
    With the learner's fleet view the other two keep inserting at the global ratio."""
    stalled_ins, stalled_samples, _ = _run_fleet(400, stalled={2}, with_views=False)
    inserted, sampled, limiter = _run_fleet(400, stalled={2}, with_views=True)
    healthy_ins, _, _ = _run_fleet(400, stalled=set(), with_views=True)
    assert _run_fleet(800, stalled={2}, with_views=False)[:2] == (stalled_ins, stalled_samples)  # for good
    assert inserted > 0.6 * healthy_ins  # two of three collectors: about two thirds of the inserts
    assert sampled > 5 * stalled_samples
    # the global ratio still holds: samples within the limiter's band of inserts x spi
    diff = inserted * limiter.samples_per_insert - sampled
    low = (limiter.min_size - limiter.error_buffer) * limiter.samples_per_insert
    high = (limiter.min_size + limiter.error_buffer) * limiter.samples_per_insert
    assert low - 8 <= diff <= high + 4 * limiter.samples_per_insert


def test_a_fleet_view_of_a_replaced_shard_process_is_ignored():
    shard = ReplayShard(0, StorageSpec(50, (2,), "float32"), SamplesPerInsertLimiter(1.0, 10, 5), seed=0)
    shard.add(chunk(0, 3))
    own = shard.counters()["insert_room"]
    assert shard.counters({"room": 100.0, "inserted_seen": 0, "incarnation": "gone"})["insert_room"] == own
    view = {"room": 100.0, "inserted_seen": 1, "incarnation": shard.incarnation}
    assert shard.counters(view)["insert_room"] == 100.0 - 2  # its share, less the 2 added since


def _fill_and_train(steps: int, capacity: int, every: list[int], restart_at: int | None = None):
    """Two shards with replay.min_size equal to the whole replay: collector i adds a chunk every
    `every[i]` steps while its shard has room; shard 1 may come back empty at `restart_at`.
    Returns the samples drawn before and after the restart, and replay's size as the learner sees it."""
    limiter = SamplesPerInsertLimiter(4.0, min_size=2 * capacity, error_buffer=10)
    share = SamplesPerInsertLimiter(4.0, min_size=capacity, error_buffer=5)
    _, mixer, sampled = _step_fleet(steps, 2, capacity, limiter, share, lambda i, step: step % every[i] == 0,
                                    micro_batch=4, restart_at=restart_at)
    return sampled, int(mixer.sizes.sum())


def test_replay_below_its_minimum_always_has_insert_room():
    """Replay that must be full before learning (min_size = all of it), and one collector three
    times faster than the other: its shard fills, then overwrites, and its inserts use up the
    limiter's room while replay still lacks some of its minimum. The learner waits for the
    minimum and the collectors for room: without the fill's own room the run hangs for good."""
    sampled, size = _fill_and_train(300, capacity=20, every=[1, 3])
    assert size == 40 and sampled[0] > 0


def test_a_shard_restarted_empty_is_refilled_and_learning_resumes():
    """After learning started, shard 1 comes back empty, replay drops below its minimum and the
    learner stops sampling; the collectors must be let in to fill it again."""
    sampled, size = _fill_and_train(600, capacity=20, every=[1, 1], restart_at=300)
    assert sampled[0] > 0 and sampled[1] > 0 and size == 40
