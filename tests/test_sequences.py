"""Sequence replay storage (replay/sequences.py): steps stored once per env, sequences as index
ranges over them with the recurrent state at their first step, valid from their last step's
arrival until their first step is overwritten."""

import numpy as np
import pytest

from raypex.replay.sequences import SequenceStorage

E, LENGTH, OVERLAP = 2, 4, 2  # a sequence every 2 steps, each 4 long


def storage(capacity: int = 16, overlap: int = OVERLAP) -> SequenceStorage:
    return SequenceStorage(capacity, E, LENGTH, overlap, (3,), "float32", state_size=2)


def chunk(first_index: int, count: int, period: int = LENGTH - OVERLAP) -> dict:
    """Steps first_index.. of both envs: obs [n, e, n + e, ...], reward n + 10 e, a state per
    sequence start of [n, e]; env 1's episode starts at stream number 5."""
    numbers = np.arange(first_index, first_index + count)
    obs = np.stack([np.stack([np.full(3, n + 100 * e, np.float32) for e in range(E)]) for n in numbers])
    starts = numbers[numbers % period == 0]
    return {"obs": obs, "action": np.tile(numbers[:, None] % 2, (1, E)), "first_index": first_index,
            "reward": (numbers[:, None] + 10 * np.arange(E)[None, :]).astype(np.float32),
            "discount": np.full((count, E), 0.9, np.float32),
            "first": (numbers[:, None] == np.array([0, 5])[None, :]) | (numbers[:, None] == 0),
            "state": np.array([[[n, e] for e in range(E)] for n in starts], np.float32).reshape(len(starts), E, 2)}


def starts_of(s: SequenceStorage, rows: np.ndarray) -> list[int]:
    return sorted({int(n) for n in s.start[rows]})


def test_a_sequence_is_its_steps_read_in_place_with_the_state_at_its_first():
    s = storage()
    placed = s.add(chunk(0, 6))
    assert s.size == 4 and starts_of(s, s.sampleable_rows()) == [0, 2]  # 2..5 complete, 4..7 not yet
    assert sorted(placed.rows) == sorted(s.sampleable_rows()) and len(placed.cleared) == 0
    batch = s.gather(np.sort(s.sampleable_rows()))
    assert batch["obs"].shape == (4, LENGTH, 3) and batch["state"].shape == (4, 2)
    by_start = {(int(st[0]), int(st[1])): i for i, st in enumerate(batch["state"])}
    env1_from2 = by_start[(2, 1)]
    np.testing.assert_array_equal(batch["obs"][env1_from2, :, 0], [102, 103, 104, 105])
    np.testing.assert_array_equal(batch["reward"][env1_from2], [12, 13, 14, 15])
    np.testing.assert_array_equal(batch["first"][env1_from2], [False, False, False, True])  # env 1's new episode
    np.testing.assert_array_equal(batch["obs"][by_start[(0, 0)], :, 0], [0, 1, 2, 3])
    assert s.total_added == 6 * E  # counted in env steps


def test_sequences_whose_first_step_is_overwritten_go_and_the_newest_read_across_the_rings_end():
    s = storage()  # 8 steps per env
    s.add(chunk(0, 6))
    placed = s.add(chunk(6, 6))  # steps 0..3 overwritten by 8..11
    assert starts_of(s, s.sampleable_rows()) == [4, 6, 8]
    assert len(placed.cleared) == 4 and not set(placed.cleared) & set(s.sampleable_rows())  # starts 0 and 2
    assert starts_of(s, placed.rows) == [4, 6, 8]
    env0 = [r for r in s.sampleable_rows() if s.start[r] == 6 and r // s.slots_per_env == 0]
    np.testing.assert_array_equal(s.gather(np.array(env0))["obs"][0, :, 0], [6, 7, 8, 9])  # 8, 9 wrapped
    assert s.total_added == 12 * E


def test_overlap_costs_no_step_memory():
    apart, overlapping = storage(1000, overlap=0), storage(1000, overlap=3)
    for name in ("obs", "action", "reward", "discount", "first"):
        assert apart.columns[name].nbytes == overlapping.columns[name].nbytes
    # only the states of the extra sequences: one state of 2 floats per sequence start
    assert overlapping.columns["state"].nbytes < 5 * apart.columns["state"].nbytes


def test_a_restarted_collector_counts_on_after_the_stored_steps():
    s = storage()
    s.add(chunk(0, 4))
    s.add(chunk(0, 4))  # its stream from 0 again: stored as steps 4..7
    assert s.written == 8 and starts_of(s, s.sampleable_rows()) == [0, 2, 4]
    # the old stream's last step ends its episodes for learning; the new one starts afresh
    across = s.gather(np.array([r for r in s.sampleable_rows() if s.start[r] == 2]))
    np.testing.assert_array_equal(across["discount"][:, 1], 0.0)  # step 3, the old process's last
    np.testing.assert_array_equal(across["discount"][:, 0], np.float32(0.9))
    assert across["first"][:, 2].all()  # step 4, the new process's first


def test_a_restarted_collectors_sequences_start_where_it_took_its_states():
    """A stream restarted at a step that is no multiple of the period: its sequences start every
    `period` steps of its own count (where its states were taken), and keep their states."""
    s = storage()
    s.add(chunk(0, 5))  # steps 0..4; sequences from 0 and 2 complete or not, 4 started
    restarted = chunk(0, 6)  # the new process's steps 0..5, stored as 5..10, its states at its 0, 2, 4
    s.add(restarted)
    assert s.written == 11
    new = [r for r in s.sampleable_rows() if s.start[r] >= 5]
    assert sorted({int(n) for n in s.start[new]}) == [5, 7]  # its 0 and 2; its 4 (stored 9) is not complete
    batch = s.gather(np.array(new))
    np.testing.assert_array_equal(batch["state"][:, 0] + 5, s.start[new])  # the state it took at that step
    np.testing.assert_array_equal(batch["obs"][:, 0, 0] % 100, batch["state"][:, 0])  # and its step


def test_a_chunk_must_bring_a_state_for_each_sequence_it_starts():
    s = storage()
    bad = chunk(0, 6)
    bad["state"] = bad["state"][:2]
    with pytest.raises(ValueError, match=r"starts 3 sequences \(every 2 steps\) and brings 2 states"):
        s.add(bad)


def test_the_state_of_a_storage_comes_back_whole():
    s = storage()
    s.add(chunk(0, 6))
    s.add(chunk(6, 3))
    again = storage()
    again.set_state(s.get_state())
    rows = np.sort(s.sampleable_rows())
    np.testing.assert_array_equal(np.sort(again.sampleable_rows()), rows)
    for name, values in s.gather(rows).items():
        np.testing.assert_array_equal(again.gather(rows)[name], values)
    assert (again.written, again.total_added) == (9, 18)


def test_a_slot_taken_by_a_newer_sequence_in_one_chunk_is_cleared_and_placed():
    s = storage()
    s.add(chunk(0, 6))
    first_slot = [r for r in s.sampleable_rows() if s.start[r] == 0]
    placed = s.add(chunk(6, 10))  # the ring keeps steps 8..15: start 10 takes start 0's slot
    assert starts_of(s, s.sampleable_rows()) == [8, 10, 12]
    assert set(first_slot) <= set(placed.cleared) and set(first_slot) <= set(placed.rows)
    assert s.start[first_slot[0]] == 10


def sharded(prioritized: bool = False):
    from raypex.replay.priorities import BetaSchedule, PrioritySettings
    from raypex.replay.rate_limit import SamplesPerInsertLimiter
    from raypex.replay.shard import StorageSpec
    from raypex.replay.sharded import ShardedReplay

    spec = StorageSpec(16, (3,), "float32", num_envs=E, sequence_length=LENGTH, sequence_overlap=OVERLAP,
                       state_size=2)
    settings = (PrioritySettings(0.6, 1e-6, "max"), BetaSchedule(0.4, 1000, 8)) if prioritized else (None, None)
    return ShardedReplay(2, spec, SamplesPerInsertLimiter(0.0, 4 * E, 1), 0, *settings)


def test_sequences_across_shards_are_drawn_from_every_shard_and_gathered_where_they_are():
    replay = sharded()
    replay.add(0, chunk(0, 6))
    assert not replay.can_sample(1) or replay.steps_held >= 4 * E
    shifted = chunk(0, 6)
    shifted["obs"] = shifted["obs"] + 1000  # shard 1's steps tell themselves apart
    replay.add(1, shifted)
    assert replay.inserted == 2 * 6 * E and replay.steps_held == 2 * 6 * E and replay.size == 8
    draw = replay.draw(2, 50)
    batch = replay.gather(draw)
    assert batch["obs"].shape == (2, 50, LENGTH, 3) and batch["state"].shape == (2, 50, 2)
    obs = batch["obs"][..., 0].reshape(-1, LENGTH)
    shard_one = obs[:, 0] >= 1000
    assert 0 < shard_one.sum() < len(obs)  # both shards hit
    local = np.where(shard_one[:, None], obs - 1000, obs)
    # each drawn sequence is consecutive steps of one env, and starts where its stored state says
    np.testing.assert_array_equal(np.diff(local % 100, axis=1), 1)
    np.testing.assert_array_equal(local[:, 0] % 100, batch["state"].reshape(-1, 2)[:, 0])
    assert replay.sampled == 100 * LENGTH  # the replay ratio counts a sequence's steps


def test_prioritized_sequences_get_their_priority_back_in_their_own_shard():
    replay = sharded(prioritized=True)
    replay.add(0, chunk(0, 6))
    replay.add(1, chunk(0, 6))
    draw = replay.draw(1, 8)
    assert draw.weight.shape == (1, 8) and draw.keys is not None
    applied = replay.update_priorities(draw.keys, np.full((1, 8), 5.0))
    assert applied == 8


def test_a_sequence_shard_written_to_a_replay_file_comes_back_whole(tmp_path):
    """What a checkpoint does with a shard: its state through replay/state_file.py (arrays and
    numbers, no pickle) into a fresh shard, which then draws the same sequences."""
    from raypex.replay.state_file import read_state, write_state

    replay = sharded(prioritized=True)
    replay.add(0, chunk(0, 6))
    replay.add(0, chunk(6, 6))
    with open(tmp_path / "shard.npz", "wb") as sink:
        write_state(replay.get_state(0), sink)
    fresh = sharded(prioritized=True)
    fresh.set_state(0, read_state(str(tmp_path / "shard.npz"), "shard.npz"))
    assert fresh.inserted == replay.inserted and fresh.size == replay.size
    original, restored = replay.shards[0].storage, fresh.shards[0].storage
    rows = original.sampleable_rows()
    np.testing.assert_array_equal(restored.sampleable_rows(), rows)
    for name, values in original.gather(rows).items():
        np.testing.assert_array_equal(restored.gather(rows)[name], values)
    fresh.add(0, chunk(12, 4))  # and it goes on where it was
    assert fresh.inserted == replay.inserted + 4 * E


def test_a_sequence_replay_step_costs_about_what_a_flat_transition_does():
    """raypex bench's replay_bytes_per_step at R2D2's sequences of 80 overlapping by 40 and an LSTM
    of 128: a step stored once, a float16 state per 40 steps, an int32 action."""
    from raypex.actors.envs import inspect_env
    from raypex.cluster.commands.bench import sequence_bytes_row
    from raypex.cluster.config.loading import load_config

    config = load_config(None, ["algo.name=r2d2", "env.id=popgym-RepeatPreviousEasy-v0", "replay.initial_priority=max",
                                "replay.sequence_length=80", "replay.sequence_overlap=40", "network.recurrent_size=128"])
    row = sequence_bytes_row(config, inspect_env(config.env.id, {}))
    # a step: 4 one-hot floats, an int32, reward, discount, first, and 2 x 128 float16 / 40 of a state
    assert row.value == pytest.approx(16 + 4 + 4 + 4 + 1 + 512 / 40, rel=0.01) and row.reference == 48
    assert row.ratio <= 1.15
