"""Frame-once pixel replay against a straightforward reference that stores whole stacks (no Ray).

The fake vector env below emits random frames and ends episodes at random steps (terminations and
truncations, NEXT_STEP autoreset: the step after a done is a reset step). Both paths see the same
steps: the reference stacks frames with FrameStacker, folds whole stacks with NStepFolder and keeps
them in a RingStorage; the frame path sends FrameAdder chunks into a FrameStorage small enough to
wrap many times. Every transition the frame storage can sample must equal the reference's.
"""

import numpy as np
import pytest

from raypex.actors.adders import EnvStep, FrameAdder
from raypex.actors.frames import FrameStacker
from raypex.actors.nstep import NStepFolder
from raypex.replay.frames import FrameStorage, frame_bytes_per_slot
from raypex.replay.priorities import PriorityIndex, PrioritySettings
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.ring import RingStorage, transition_layout
from raypex.replay.shard import StorageSpec
from raypex.replay.sharded import ShardedReplay

FRAME = (3, 4)


class RandomFrameEnv:
    """A vector env of random uint8 frames; each env step ends an episode with probability p."""

    def __init__(self, num_envs: int, seed: int, p_end: float):
        self.rng = np.random.default_rng(seed)
        self.num_envs, self.p_end = num_envs, p_end
        self.ended = np.zeros(num_envs, bool)

    def frames(self) -> np.ndarray:
        return self.rng.integers(0, 256, (self.num_envs, *FRAME), dtype=np.uint8)

    def step(self):
        reward = self.rng.normal(size=self.num_envs)
        end = self.rng.random(self.num_envs) < self.p_end
        terminated = end & (self.rng.random(self.num_envs) < 0.5) & ~self.ended
        truncated = end & ~terminated & ~self.ended
        reward = np.where(self.ended, 0.0, reward)  # a reset step has no reward
        self.ended = terminated | truncated
        return self.frames(), reward, terminated, truncated


def acted_values(stacks: np.ndarray) -> np.ndarray:
    """Q-values [E, 6] a fixed fake network gives stacks: different stacks, different values."""
    flat = stacks.reshape(len(stacks), -1).astype(np.float32) / 255
    return flat @ np.random.default_rng(0).normal(size=(flat.shape[1], 6)).astype(np.float32)


def run_both(steps: int, num_envs: int, stack: int, n: int, capacity: int, seed: int, chunk_steps: int = 5,
             p_end: float = 0.08, prioritized: bool = False):
    """Feed the same random episodes through both paths; returns (frame storage, reference by key).
    Along the way each transition's initial priority, made of the values a fake network gave the
    stacks as the collector acted, must be its |n-step TD error| over the reference's obs and
    next_obs; and `prioritized`, every slot has mass exactly when it holds a transition that can be
    sampled (the storage's PriorityIndex is then `storage.priorities`)."""
    env = RandomFrameEnv(num_envs, seed, p_end)
    rng = np.random.default_rng(seed + 1)
    stacker = FrameStacker(num_envs, stack, FRAME)
    reference = NStepFolder(n, 0.9, num_envs, (stack, *FRAME), np.uint8, chunk_steps, with_env=True)
    storage = FrameStorage(capacity, num_envs, FRAME, stack)
    priorities = storage.priorities = PriorityIndex(storage.capacity, PrioritySettings()) if prioritized else None
    ring = RingStorage(10 * steps * num_envs, transition_layout((stack, *FRAME), "uint8"))
    keys: list[tuple[int, int]] = []
    obs = stacker.reset(env.frames())
    adder = FrameAdder(n, 0.9, num_envs, chunk_steps, obs, with_priorities=True)
    episode_start = np.zeros(num_envs, bool)
    for t in range(steps):
        q = acted_values(obs)  # as a collector acts: this forward also bootstraps the last step
        adder.set_next_value(q.max(axis=1))
        action = rng.integers(0, 6, num_envs)
        frames, reward, terminated, truncated = env.step()
        next_obs = stacker.push(frames, episode_start)
        episode_start = terminated | truncated
        reference.add_step(obs, action, reward, terminated, truncated, next_obs)
        adder.add(EnvStep(obs, action, reward, terminated, truncated, next_obs, q_taken=q[np.arange(num_envs), action]))
        obs = next_obs
        if (t + 1) % chunk_steps == 0:
            adder.set_next_value(acted_values(obs).max(axis=1))  # the next act's forward, run before the pop
            expected, chunk = reference.pop(), adder.pop()
            assert np.array_equal(expected["env"], chunk["env"])  # same transitions, same order
            taken = acted_values(expected["obs"])[np.arange(len(expected["action"])), expected["action"]]
            target = expected["return"] + expected["discount"] * acted_values(expected["next_obs"]).max(axis=1)
            np.testing.assert_allclose(chunk["priority"], np.abs(target - taken), rtol=1e-5, atol=1e-5)
            ring.add(expected)
            keys += list(zip(chunk["env"].tolist(), chunk["obs"].tolist()))
            first_stamp = storage.total_added
            placement = storage.add(chunk)
            if priorities is not None:
                priorities.place(placement, first_stamp, rng.random(len(chunk["action"])))
                has_mass = priorities.tree.get(np.arange(storage.capacity)) > 0
                np.testing.assert_array_equal(has_mass, storage.valid.reshape(-1))
    index = {key: row for row, key in enumerate(keys)}
    return storage, ring, index


def assert_matches_reference(storage: FrameStorage, ring: RingStorage, index: dict) -> int:
    rows = np.flatnonzero(storage.valid)
    got = storage.gather(rows)
    env, start = storage.keys(rows)
    expected = ring.gather(np.array([index[(e, s)] for e, s in zip(env.tolist(), start.tolist())]))
    for name in ("obs", "action", "return", "discount", "next_obs"):
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    return len(rows)


def test_stacks_handed_out_are_never_written_again():
    """The collector keeps the last stacks as the obs it acts on next, and the adder reads them:
    a later push or reset must not change them."""
    rng = np.random.default_rng(0)
    stacker = FrameStacker(3, 4, (5, 5))
    frames = [rng.integers(0, 256, (3, 5, 5), dtype=np.uint8) for _ in range(6)]
    first = stacker.reset(frames[0])
    kept = [first.copy()]
    handed = [first]
    for i, f in enumerate(frames[1:]):
        handed.append(stacker.push(f, np.array([i == 2, False, False])))
        kept.append(handed[-1].copy())
    stacker.reset(frames[5])
    for array, copy in zip(handed, kept, strict=True):
        assert np.array_equal(array, copy)
    assert np.array_equal(handed[-1][1], np.stack(frames[2:6])[:, 1])  # oldest first
    assert np.array_equal(handed[3][0], np.repeat(frames[3][None, 0], 4, axis=0))  # episode start fills


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("stack,n", [(4, 3), (2, 1), (4, 5)])
def test_frame_storage_rebuilds_the_reference_stacks(seed, stack, n):
    storage, ring, index = run_both(steps=400, num_envs=3, stack=stack, n=n, capacity=150, seed=seed)
    assert storage.written == 401 and storage.slots == 50
    sampled = assert_matches_reference(storage, ring, index)
    # Everything the ring still holds a whole history for, and whose n-step window is folded, is there.
    oldest = storage.written - storage.slots
    newest_folded = max(s for _, s in index)
    must = {(e, s) for (e, s) in index if oldest + stack - 1 <= s}
    env, start = storage.keys(np.flatnonzero(storage.valid))
    have = set(zip(env.tolist(), start.tolist()))
    assert must <= have and sampled == len(have) and max(start) == newest_folded
    # No stack reaches across an episode boundary: the episode's first frame is repeated instead.
    rows = np.flatnonzero(storage.valid)
    obs = storage.gather(rows)["obs"]
    steps = storage.frame_step.reshape(-1)[rows]
    young = steps < stack - 1
    for row_obs, step in zip(obs[young], steps[young]):
        first = stack - 1 - step
        assert (row_obs[:first + 1] == row_obs[first]).all()


@pytest.mark.parametrize("stack,n", [(4, 3), (2, 1), (1, 3)])
def test_a_draw_across_pixel_shards_gathers_each_shards_own_stacks(stack, n):
    """Two frame storages become shards 0 and 1 of one replay: every transition a draw picks,
    gathered from the replay's whole columns by the draw's indices, is the one its own shard holds."""
    storages = [run_both(steps=200, num_envs=3, stack=stack, n=n, capacity=150, seed=seed, p_end=0.05)[0]
                for seed in (7, 8)]
    rep = ShardedReplay(2, StorageSpec(150, (stack, *FRAME), "uint8", stack, 3), SamplesPerInsertLimiter(0, 1, 1), 0)
    for i, storage in enumerate(storages):
        rep.set_state(i, {"storage": storage.get_state(), "sampled": 0})
    draw = rep.draw(4, 64)
    assert draw.index["obs_frames"].shape == draw.index["next_frames"].shape == (4, 64, stack)
    batch = rep.gather(draw)
    assert batch["obs"].shape == (4, 64, stack, *FRAME) and batch["obs"].dtype == np.uint8
    rows = draw.index["row"].ravel()
    shard, local = np.divmod(rows, rep.rows_per_shard)
    assert set(shard.tolist()) == {0, 1}
    for field in ("obs", "next_obs", "action", "return", "discount"):
        expected = np.stack([storages[s].gather(np.array([r]))[field][0] for s, r in zip(shard, local)])
        np.testing.assert_array_equal(batch[field].reshape(len(rows), *batch[field].shape[2:]), expected,
                                      err_msg=field)


def test_sampling_is_uniform_over_valid_slots_without_rejection():
    storage, _, _ = run_both(steps=120, num_envs=2, stack=4, n=3, capacity=200, seed=5, p_end=0.2)
    valid = np.flatnonzero(storage.valid)
    assert 0 < len(valid) < storage.capacity  # some slots are ends of episodes or not yet folded
    rows = storage.sample_rows(200_000, np.random.default_rng(0))
    assert set(rows.tolist()) == set(valid.tolist())
    counts = np.bincount(rows, minlength=storage.capacity)[valid]
    expected = len(rows) / len(valid)
    assert np.abs(counts - expected).max() < 6 * np.sqrt(expected)


def test_restarted_collector_continues_after_the_stored_stream():
    storage, _, _ = run_both(steps=60, num_envs=2, stack=4, n=3, capacity=400, seed=3)
    before = storage.size
    # A new adder numbers from 0 again; the storage renumbers it after frame `written`.
    env = RandomFrameEnv(2, 9, 0.1)
    stacker = FrameStacker(2, 4, FRAME)
    obs = stacker.reset(env.frames())
    adder = FrameAdder(3, 0.9, 2, 5, obs)
    start = np.zeros(2, bool)
    for _ in range(10):
        frames, reward, te, tr = env.step()
        next_obs = stacker.push(frames, start)
        start = te | tr
        adder.add(EnvStep(obs, np.zeros(2, np.int64), reward, te, tr, next_obs))
        obs = next_obs
    storage.add(adder.pop())
    assert storage.written == 61 + 11 and storage.size > before
    new_rows = np.flatnonzero(storage.valid & (storage.stream >= 61))
    assert len(new_rows) > 0
    # Stacks of the new stream's first frames repeat that frame; they never reach into the old stream.
    first_frame_rows = new_rows[storage.stream.reshape(-1)[new_rows] == 61]
    for stack in storage.gather(first_frame_rows)["obs"]:
        assert (stack == stack[-1]).all()


def test_atari_sized_storage_is_within_the_bytes_bar():
    frame = (84, 84)
    per_slot = frame_bytes_per_slot(frame)
    assert per_slot <= 1.1 * 7056
    assert 1_000_000 * per_slot <= 8 * 2**30  # a million transitions across all shards fit in 8 GiB
    storage = FrameStorage(4_000, 8, frame, 4)
    assert storage.nbytes == storage.capacity * per_slot
    # Filled with episodes of a few hundred steps (Pong's are longer), almost every slot is sampleable.
    rng = np.random.default_rng(0)
    stacks = np.zeros((8, 4, *frame), np.uint8)
    adder = FrameAdder(3, 0.99, 8, 32, stacks)
    ended = np.zeros(8, bool)
    for t in range(1_000):
        done = (rng.random(8) < 1 / 300) & ~ended
        adder.add(EnvStep(stacks, np.zeros(8, np.int64), np.zeros(8), done, np.zeros(8, bool), stacks))
        ended = done
        if (t + 1) % 32 == 0:
            storage.add(adder.pop())
    assert storage.size >= 0.98 * storage.capacity
    assert storage.nbytes / storage.size <= 1.1 * 7056


@pytest.mark.parametrize("seed", [0, 1])
def test_prioritized_frame_storage_never_draws_a_slot_that_cannot_be_sampled(seed):
    # run_both checks mass == valid after every chunk; here the draws themselves
    storage, ring, index = run_both(steps=400, num_envs=3, stack=4, n=3, capacity=150, seed=seed, prioritized=True)
    rows = storage.priorities.sample(20_000, np.random.default_rng(seed))
    assert storage.valid.reshape(-1)[rows].all()
    assert len(np.unique(rows)) == storage.size  # and every sampleable one is drawn
    env, start = storage.keys(rows[:50])
    np.testing.assert_array_equal(storage.gather(rows[:50])["obs"],
                                  ring.gather(np.array([index[(e, s)] for e, s in zip(env.tolist(), start.tolist())]))["obs"])
