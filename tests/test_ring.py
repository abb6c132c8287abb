"""RingStorage, the samples-per-insert limiter and the sharded replay's uniform draws (no Ray)."""

import numpy as np
import pytest

from raypex.replay.contracts import BATCH_FIELDS
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.ring import RingStorage, transition_layout
from raypex.replay.shard import StorageSpec
from raypex.replay.sharded import ShardedReplay


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


def test_a_restored_storage_has_the_digest_of_the_state_it_was_restored_from():
    """replay/digest.py: what a Tune exploit compares (the donor's checkpoint, the recipient's shard)."""
    from raypex.replay.digest import content_digest

    ring = storage(6)
    ring.add(chunk(0, 9))
    saved = ring.get_state()
    other = storage(6)
    other.set_state(saved)
    assert content_digest(other.get_state()) == content_digest(saved)
    other.add(chunk(100, 1))  # one transition more
    assert content_digest(other.get_state()) != content_digest(saved)
    changed = storage(6)
    changed.set_state(saved)
    changed.columns["return"][2] += 1.0  # one value differs, size and cursors the same
    assert content_digest(changed.get_state()) != content_digest(saved)


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


def replay(num_shards: int, capacity: int, limiter: SamplesPerInsertLimiter, seed: int = 0) -> ShardedReplay:
    return ShardedReplay(num_shards, StorageSpec(capacity, (2,), "float32"), limiter, seed)


def test_a_draw_gathers_whole_transitions_from_every_shard_and_counts_them():
    rep = replay(3, 50, SamplesPerInsertLimiter(1.0, 10, 5))
    assert rep.add(0, chunk(0, 12)) == pytest.approx(3.0 / 3)  # room (10+5-12) shared by three collectors
    rep.add(2, chunk(100, 6))
    draw = rep.draw(2, 4)
    assert set(draw.index) == {"row"} and draw.index["row"].shape == (2, 4) and draw.weight is None
    batch = rep.gather(draw)
    assert set(batch) == set(BATCH_FIELDS)  # nothing the learner does not read
    assert batch["obs"].shape == (2, 4, 2) and batch["obs"].dtype == np.float32
    # chunk() numbers transitions: every field of a drawn row is that transition's
    assert np.array_equal(batch["obs"][..., 0], batch["action"])
    assert set(batch["action"].ravel().tolist()) <= set(range(12)) | set(range(100, 106))
    stats = rep.stats()
    assert [s.sampled for s in stats] == [int((draw.index["row"] < 50).sum()), 0,
                                             int((draw.index["row"] >= 100).sum())]
    assert sum(s.sampled for s in stats) == 8 and [s.inserted for s in stats] == [12, 0, 6]


def test_each_transition_is_drawn_uniformly_whichever_shard_holds_it():
    rep = replay(3, 1000, SamplesPerInsertLimiter(0.0, 10, 1), seed=1)
    rep.add(0, chunk(0, 100))
    rep.add(1, chunk(1000, 300))
    batch = rep.gather(rep.draw(8, 1000))
    actions = batch["action"].ravel()
    assert ((actions >= 1000).mean()) == pytest.approx(0.75, abs=0.02)  # 300 of 400 stored
    counts = np.bincount(actions[actions < 1000], minlength=100)
    assert counts.min() > 0 and counts.max() < 3 * counts.mean()  # every transition of shard 0 drawn


def test_one_limiter_holds_the_ratio_for_the_whole_replay():
    rep = replay(2, 100, SamplesPerInsertLimiter(1.0, min_size=20, error_buffer=10))
    rep.add(0, chunk(0, 10))
    assert not rep.can_sample(10)  # below min_size
    rep.add(1, chunk(0, 10))
    assert rep.can_sample(10) and not rep.can_sample(11)  # diff = 20 - samples must stay >= (20-10)*1
    rep.draw(1, 10)
    assert not rep.can_sample(1)
    assert rep.insert_room() == pytest.approx((30 - 20 + 10) / 2)  # ten samples bought ten inserts, in two shares


def _step(steps: int, adds, limiter: SamplesPerInsertLimiter, capacity: int = 1000, chunk_size: int = 4,
          micro_batch: int = 8, shards: int = 3) -> tuple[ShardedReplay, int]:
    """Collectors and a learner in turns, as the Ray wiring runs them: collector i adds a chunk
    when `adds(i, step)` and its insert room is positive, the learner draws while the limiter
    allows. Returns the replay and the transitions drawn."""
    rep = replay(shards, capacity, limiter)
    drawn = 0
    for step in range(steps):
        for i in range(shards):
            if adds(i, step) and rep.insert_room() > 0:
                rep.add(i, chunk(0, chunk_size))
        while rep.can_sample(micro_batch):
            rep.draw(1, micro_batch)
            drawn += micro_batch
    return rep, drawn


def test_a_stalled_collector_does_not_stop_the_others_or_the_learner():
    """Collector 2 stops inserting after 10 steps: the other two keep inserting at the ratio, and
    the learner keeps drawing."""
    limiter = SamplesPerInsertLimiter(2.0, min_size=60, error_buffer=30)
    healthy, _ = _step(400, lambda i, step: True, limiter)
    stalled, drawn = _step(400, lambda i, step: i != 2 or step < 10, limiter)
    assert stalled.inserted > 0.6 * healthy.inserted  # two of three collectors: about two thirds
    assert drawn > 0.6 * healthy.sampled
    diff = stalled.inserted * limiter.samples_per_insert - drawn
    low = (limiter.min_size - limiter.error_buffer) * limiter.samples_per_insert
    high = (limiter.min_size + limiter.error_buffer) * limiter.samples_per_insert
    assert low - 8 <= diff <= high + 3 * 4 * limiter.samples_per_insert  # within the band, three chunks of slack


def test_replay_below_its_minimum_always_has_insert_room():
    """Replay that must be full before learning (min_size = all of it), and one collector three
    times faster than the other: its shard fills, then overwrites, and its inserts use up the
    limiter's room while replay still lacks some of its minimum. The learner waits for the
    minimum and the collectors for room: without the fill's own room the run hangs for good."""
    limiter = SamplesPerInsertLimiter(4.0, min_size=40, error_buffer=10)
    rep, drawn = _step(300, lambda i, step: step % [1, 3][i] == 0, limiter, capacity=20, micro_batch=4, shards=2)
    assert rep.size == 40 and drawn > 0


def test_a_replacement_learners_replay_counts_what_its_collectors_sent_that_died_before_it():
    """The dead learner's shard took 70 transitions (its checkpoint holds the first 40); the next
    10 reached the replacement before its restore replaced them, the 10 after died in flight. Each
    chunk says how many its collector sent: what the replay does not hold died, and the counts add up."""
    dead = replay(1, 100, SamplesPerInsertLimiter(0.0, 1, 1))
    dead.add(0, chunk(0, 40), writer_env_steps=40)
    checkpoint = dead.get_state(0)
    dead.add(0, chunk(40, 30), writer_env_steps=70)
    assert dead.stats()[0].lost_writes == 0  # nothing died where no learner did
    new = replay(1, 100, SamplesPerInsertLimiter(0.0, 1, 1))
    new.count_lost_writes()
    assert new.stats()[0].lost_writes == 0  # not known until its collector's first chunk arrives
    new.add(0, chunk(70, 10), writer_env_steps=80)  # reached the new process before the restore replaced it
    new.set_state(0, checkpoint)
    assert new.stats()[0].lost_writes == 40  # sent 80, holds the checkpoint's 40
    new.add(0, chunk(90, 5), writer_env_steps=95)
    stats = new.stats()[0]
    assert (stats.inserted, stats.lost_writes) == (45, 50)
    assert stats.writer_env_steps == stats.inserted + stats.lost_writes


def test_a_shard_whose_collector_left_with_its_node_counts_what_it_lacks_as_lost_and_its_next_counts_on():
    """collectors.num auto: a collector gone without notice had reported 70 env steps, its shard
    holds 40 (the rest went with the node); the next collector in its slot counts on from 70."""
    shards = replay(2, 100, SamplesPerInsertLimiter(0.0, 1, 1))
    shards.attach_writer(0)
    shards.add(0, chunk(0, 40), writer_env_steps=40)
    shards.writer_left(0, 70)
    assert shards.stats()[0].lost_writes == 30 and shards.stats()[1].lost_writes == 0
    assert shards.attach_writer(0) == 70
    shards.add(0, chunk(40, 10), writer_env_steps=80)
    stats = shards.stats()[0]
    assert (stats.inserted, stats.lost_writes, stats.writer_env_steps) == (50, 30, 80)
    shards.writer_left(0, 60)  # an older report than the shard's own count changes nothing
    assert shards.stats()[0].lost_writes == 30
