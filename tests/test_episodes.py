"""Episodes rebuilt from a shard's one-step transitions (replay/episodes.py), and prior data drawn
beside the shards (replay/sharded.py): the pure parts of `raypex export --minari` and replay.prior."""

import numpy as np
import pytest

from raypex.replay.episodes import rebuild_episodes, stream_order
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.shard import StorageSpec
from raypex.replay.sharded import ShardedReplay, prior_count


def interleaved(lengths_by_env: list[list[int]], ends: list[list[str]]) -> tuple[dict, list[tuple]]:
    """The rows a collector of len(lengths_by_env) envs sends, its envs' steps interleaved step by
    step (an env whose episode just ended skips its autoreset step), and each whole episode as
    (env, first obs value, length, terminated). Observations are unique floats, as real ones are."""
    rows = {"obs": [], "action": [], "return": [], "discount": [], "next_obs": []}
    cursors = [[0, 0, 0] for _ in lengths_by_env]  # [episode, step, skip]
    value = [1000.0 * (e + 1) for e in range(len(lengths_by_env))]
    expected = []
    while any(c[0] < len(lengths_by_env[e]) for e, c in enumerate(cursors)):
        for env, cursor in enumerate(cursors):
            episode, step, skip = cursor
            if episode >= len(lengths_by_env[env]):
                continue
            if skip:  # the autoreset step: never stored
                cursor[2] = 0
                continue
            length, end = lengths_by_env[env][episode], ends[env][episode]
            if step == 0:
                value[env] += 1.0  # a reset observation
                expected.append((env, value[env], length, end == "terminated"))
            obs = value[env]
            value[env] += 1.0
            last = step == length - 1
            rows["obs"].append([obs, env])
            rows["action"].append(step % 2)
            rows["return"].append(float(step))
            rows["discount"].append(0.0 if last and end == "terminated" else 0.99)
            rows["next_obs"].append([value[env], env])
            cursor[1] = step + 1
            if last:
                cursor[0], cursor[1], cursor[2] = episode + 1, 0, 1
    columns = {name: np.asarray(values, np.float32 if name != "action" else np.int64) for name, values in rows.items()}
    return columns, expected


def summary_of(episodes) -> list[tuple]:
    return [(int(e.observations[0][1]), float(e.observations[0][0]), e.length, e.terminated) for e in episodes]


def test_each_envs_episodes_come_back_whole_in_order_of_their_start():
    lengths = [[5, 3, 7], [200, 4], [2, 2, 2, 9]]
    ends = [["terminated", "terminated", "cut"], ["truncated", "terminated"],
            ["terminated", "terminated", "terminated", "terminated"]]
    columns, expected = interleaved(lengths, ends)
    episodes = rebuild_episodes(columns, np.arange(len(columns["return"])), 3, wrapped=False, max_episode_steps=200)
    whole = [e for e in expected if e[3] or e[2] == 200]  # the cut one (7 steps, no end) is left out
    assert summary_of(episodes) == [(env, first, length, terminated) for env, first, length, terminated in whole]
    for episode in episodes:
        arrays = episode.arrays()
        assert arrays["observations"].shape == (episode.length + 1, 2)
        np.testing.assert_array_equal(arrays["rewards"], np.arange(episode.length))
        assert arrays["terminations"][-1] == episode.terminated and arrays["truncations"][-1] != episode.terminated
        assert not arrays["terminations"][:-1].any() and not arrays["truncations"][:-1].any()


def test_a_wrapped_ring_reads_from_its_cursor_and_leaves_out_each_envs_oldest_episode():
    lengths, ends = [[4, 4, 4], [3, 3, 3, 3]], [["terminated"] * 3, ["terminated"] * 4]
    columns, expected = interleaved(lengths, ends)
    n = len(columns["return"])
    cut = 5  # the ring's oldest rows were overwritten: rows 0..4 are gone, the newest wrapped to the front
    capacity = n - cut
    ring = {name: np.concatenate([values[n - 3:], values[cut:n - 3]]) for name, values in columns.items()}
    order = stream_order(capacity, 3, capacity)
    np.testing.assert_array_equal(ring["obs"][order], columns["obs"][cut:])
    episodes = rebuild_episodes(ring, order, 2, wrapped=True, max_episode_steps=None)
    # both envs' first episodes lost their start to the ring; the rest come back whole
    assert summary_of(episodes) == [e for e in expected if e not in (expected[0], expected[1])]
    assert stream_order(7, 7, 10).tolist() == list(range(7))


def test_prior_data_takes_its_share_of_every_draw_in_a_block_no_insert_reaches():
    spec = StorageSpec(64, (2,), "float32", action_dim=1)
    prior = {"obs": np.full((40, 2), -1.0, np.float32), "action": np.zeros((40, 1), np.float32),
             "return": np.arange(40, dtype=np.float32), "discount": np.full(40, 0.99, np.float32),
             "next_obs": np.full((40, 2), -1.0, np.float32)}
    replay = ShardedReplay(2, spec, SamplesPerInsertLimiter(1e9, 1, 1e9), 0, prior=prior, prior_fraction=0.25)
    for shard in (0, 1):
        for _ in range(5):  # 100 transitions into a 64-row ring: it wraps, and must not touch the prior block
            replay.add(shard, {"obs": np.ones((20, 2), np.float32), "action": np.zeros((20, 1), np.float32),
                               "return": np.full(20, 7.0, np.float32), "discount": np.full(20, 0.99, np.float32),
                               "next_obs": np.ones((20, 2), np.float32)})
    batch = replay.gather(replay.draw(4, 32))
    from_prior = batch["obs"][..., 0] == -1.0
    assert from_prior.sum() == prior_count(128, 0.25) == 32
    assert 0 < from_prior[0].sum() < 32  # spread over the micro-batches, not the first one alone
    assert set(batch["return"][from_prior].tolist()) <= set(range(40)) and (batch["return"][~from_prior] == 7.0).all()
    assert replay.sampled == 96  # the shards' counts are theirs alone
    assert replay.inserted == 200 and replay.size == 128 and replay.prior.size == 40
    assert [prior_count(2, 0.5), prior_count(256, 0.01), prior_count(256, 0.99)] == [1, 3, 253]


def test_prior_data_is_refused_where_draws_are_not_uniform_whole_transitions():
    from raypex.replay.priorities import BetaSchedule, PrioritySettings

    spec = StorageSpec(64, (2,), "float32")
    prior = {"obs": np.zeros((4, 2), np.float32)}
    with pytest.raises(ValueError, match="not with priorities, frames or sequences"):
        ShardedReplay(1, spec, SamplesPerInsertLimiter(1e9, 1, 1e9), 0, PrioritySettings(0.6, 1e-6, "max"),
                      BetaSchedule(0.4, 100, 32), prior=prior)
