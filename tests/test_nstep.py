"""NStepFolder: hand-computed golden tables, pop timing, checkpointing, a slow reference, CartPole.

Synthetic streams label every observation by env and step: obs[t, e] = K*e + t and
next_obs[t, e] = K*e + t + 1, which is exactly what a NEXT_STEP vector env produces (the reset
step's obs is the final obs of the finished episode). So an emitted obs/next_obs says which step it
came from. Reset steps (the step after a done) carry reward 0 and no done flags, like gymnasium.
"""

from __future__ import annotations

from collections import Counter

import gymnasium as gym
import numpy as np
import pytest

from raypex.actors.nstep import NStepFolder

K = 1000  # obs label = K * env + step


def make_stream(rewards, terminated=None, truncated=None):
    """[T, E] arrays -> list of add_step argument tuples with labelled obs (obs_shape (2,))."""
    rewards = np.asarray(rewards, np.float64)
    T, E = rewards.shape
    term = np.zeros((T, E), bool) if terminated is None else np.asarray(terminated, bool)
    trunc = np.zeros((T, E), bool) if truncated is None else np.asarray(truncated, bool)
    steps = []
    for t in range(T):
        label = K * np.arange(E) + t
        obs = np.stack([label, -label], axis=1).astype(np.int32)
        next_obs = np.stack([label + 1, -(label + 1)], axis=1).astype(np.int32)
        action = 7 * label  # identifies the step too
        steps.append((obs, action, rewards[t], term[t], trunc[t], next_obs))
    return steps


def new_folder(n, gamma, E, chunk_steps=8):
    return NStepFolder(n, gamma, E, (2,), np.int32, chunk_steps)


def feed(folder, steps):
    for step in steps:
        folder.add_step(*step)


def rows(out):
    """Emitted transitions as comparable tuples (obs label, action, return, discount, next_obs label)."""
    return [(int(o[0]), int(a), float(r), float(d), int(no[0]))
            for o, a, r, d, no in zip(out["obs"], out["action"], out["return"], out["discount"], out["next_obs"])]


def check_golden(out, expected):
    got = rows(out)
    assert [(o, no) for o, _, _, _, no in got] == [(o, no) for o, _, _, no in expected]
    np.testing.assert_allclose([r for _, _, r, _, _ in got], [r for _, r, _, _ in expected], rtol=1e-6)
    np.testing.assert_allclose([d for _, _, _, d, _ in got], [d for _, _, d, _ in expected], rtol=1e-6)
    assert all(a == 7 * o for o, a, _, _, _ in got)  # action belongs to the step of obs
    np.testing.assert_array_equal(out["obs"][:, 1], -out["obs"][:, 0])
    np.testing.assert_array_equal(out["next_obs"][:, 1], -out["next_obs"][:, 0])


def test_n1_plain():
    f = new_folder(1, 0.5, 1)
    feed(f, make_stream([[1.0], [2.0], [3.0]]))
    out = f.pop()
    assert out["obs"].dtype == np.int32 and out["obs"].shape == (3, 2)
    assert out["action"].dtype == np.int64 and out["return"].dtype == np.float32
    assert out["discount"].dtype == np.float32 and out["next_obs"].dtype == np.int32
    check_golden(out, [(0, 1.0, 0.5, 1), (1, 2.0, 0.5, 2), (2, 3.0, 0.5, 3)])
    assert f.pending == 0


def test_n3_middle_of_long_episode():
    f = new_folder(3, 0.9, 1)
    feed(f, make_stream([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]]))
    assert f.pending == 2  # steps 0-3 are complete (just not popped); steps 4, 5 are not
    out = f.pop()
    # s=0: 1 + .9*2 + .81*3 = 5.23 ; s=1: 2 + 2.7 + 3.24 = 7.94 ; s=2: 3 + 3.6 + 4.05 = 10.65 ;
    # s=3: 4 + 4.5 + 4.86 = 13.36 ; discount .9^3 = .729 ; next_obs 3 steps ahead
    check_golden(out, [(0, 5.23, 0.729, 3), (1, 7.94, 0.729, 4), (2, 10.65, 0.729, 5), (3, 13.36, 0.729, 6)])
    assert f.pending == 2  # steps 4 and 5 wait for more steps
    feed(f, make_stream([[0.0]] * 6 + [[7.0]])[6:])  # step 6, reward 7
    check_golden(f.pop(), [(4, 16.07, 0.729, 7)])  # 5 + 5.4 + 5.67
    assert f.pending == 2


def test_termination_inside_window():
    # n=3, gamma=.5, rewards 1,2,3,4 ; step 3 terminates ; step 4 is the reset step ; 5, 6, 7 new episode
    f = new_folder(3, 0.5, 1)
    term = [[0], [0], [0], [1], [0], [0], [0], [0]]
    feed(f, make_stream([[1.0], [2.0], [3.0], [4.0], [0.0], [6.0], [7.0], [8.0]], terminated=term))
    check_golden(f.pop(), [
        (0, 2.75, 0.125, 3),  # 1 + 1 + .75, full window
        (1, 4.5, 0.0, 4),     # 2 + 1.5 + 1 ends with the termination: no bootstrap, final obs 4
        (2, 5.0, 0.0, 4),     # 3 + 2
        (3, 4.0, 0.0, 4),
        # step 4 (obs 4 = final obs, reset step) is dropped
        (5, 11.5, 0.125, 8),  # 6 + 3.5 + 2 : the new episode, never mixed with the old one
    ])
    assert f.pending == 2


def test_truncation_inside_window():
    # n=3, gamma=.5, rewards 2,4,8 ; step 2 truncated ; step 3 is the reset step
    f = new_folder(3, 0.5, 1)
    trunc = [[0], [0], [1], [0]]
    feed(f, make_stream([[2.0], [4.0], [8.0], [0.0]], truncated=trunc))
    check_golden(f.pop(), [
        (0, 6.0, 0.125, 3),  # 2 + 2 + 2, m=3
        (1, 8.0, 0.25, 3),   # 4 + 4, m=2 < n: bootstrap .5^2 from the final obs 3
        (2, 8.0, 0.5, 3),    # m=1
    ])
    assert f.pending == 0


def vector_table():
    """E=3, 6 steps, reward = 10*e + t on real steps. env0 terminates at 2, env1 truncates at 4."""
    r = np.array([[10 * e + t for e in range(3)] for t in range(6)], np.float64)
    term = np.zeros((6, 3), bool)
    trunc = np.zeros((6, 3), bool)
    term[2, 0] = True
    trunc[4, 1] = True
    r[3, 0] = r[5, 1] = 0.0  # reset steps
    return make_stream(r, term, trunc)


VECTOR_GOLDEN = [  # n=2, gamma=.5: return r[s] + .5 r[s+1]; ordered by start step, then env
    (0, 0.5, 0.25, 2), (1000, 15.5, 0.25, 1002), (2000, 30.5, 0.25, 2002),
    (1, 2.0, 0.0, 3), (1001, 17.0, 0.25, 1003), (2001, 32.0, 0.25, 2003),
    (2, 2.0, 0.0, 3), (1002, 18.5, 0.25, 1004), (2002, 33.5, 0.25, 2004),
    (1003, 20.0, 0.25, 1005), (2003, 35.0, 0.25, 2005),  # env0 step 3 is its reset step: dropped
    (4, 6.5, 0.25, 6), (1004, 14.0, 0.5, 1005), (2004, 36.5, 0.25, 2006),
]


def test_vector_autoreset():
    f = new_folder(2, 0.5, 3)
    feed(f, vector_table())
    out = f.pop()
    check_golden(out, VECTOR_GOLDEN)
    assert 3 not in out["obs"][:, 0] and 1005 not in out["obs"][:, 0]  # reset-step obs never emitted
    assert f.pending == 2  # env0 step 5 and env2 step 5 (env1 step 5 is a reset step)


@pytest.mark.parametrize("pop_after", [[1, 2, 3, 4, 5, 6], [1, 6], [2, 4, 6], [3, 5, 6], [6]])
def test_pop_timing_does_not_matter(pop_after):
    f = new_folder(2, 0.5, 3, chunk_steps=2)  # popping 6 steps at once also exercises buffer growth
    steps = vector_table()
    got, done = [], 0
    for upto in pop_after:
        feed(f, steps[done:upto])
        done = upto
        out = f.pop()
        starts = [(o % K, o // K) for o in out["obs"][:, 0]]
        assert starts == sorted(starts)  # each pop is ordered by start step, then env
        got += rows(out)
    assert len(got) == len(VECTOR_GOLDEN) == len({g[0] for g in got})  # nothing lost, nothing twice
    assert sorted(got) == sorted(rows(f_single_pop()))
    assert f.pop()["obs"].shape == (0, 2) and f.pending == 2


def f_single_pop():
    f = new_folder(2, 0.5, 3)
    feed(f, vector_table())
    return f.pop()


def test_add_step_copies_observations():
    f = new_folder(1, 0.5, 1)
    obs, action, reward, term, trunc, next_obs = make_stream([[1.0]])[0]
    f.add_step(obs, action, reward, term, trunc, next_obs)
    obs[:] = 99
    next_obs[:] = 99
    check_golden(f.pop(), [(0, 1.0, 0.5, 1)])


def test_state_roundtrip_mid_stream():
    steps = vector_table()
    a = new_folder(2, 0.5, 3)
    feed(a, steps[:3])  # mid-stream: env0 just terminated (step 3 must still be dropped)
    first = rows(a.pop())
    feed(a, steps[3:4])
    state = a.get_state()
    b = new_folder(2, 0.5, 3)
    b.set_state(state)
    feed(a, steps[4:])
    a_rest = rows(a.pop())
    state["reward"][:] = -1  # the restored folder holds its own copy
    feed(b, steps[4:])
    assert rows(b.pop()) == a_rest
    assert sorted(first + a_rest) == sorted(rows(f_single_pop()))
    with pytest.raises(ValueError):
        new_folder(3, 0.5, 3).set_state(a.get_state())


def reference(n, gamma, rewards, term, trunc, seen):
    """Slow and obvious: per env, per valid start step, walk the window over the first `seen` steps."""
    out = []
    _, E = rewards.shape
    for e in range(E):
        prev_done = False
        for s in range(seen):
            valid, prev_done = not prev_done, bool(term[s, e] or trunc[s, e]) and not prev_done
            if not valid:
                continue
            ret, m, ended, terminated = 0.0, 0, False, False
            for k in range(n):
                if s + k >= seen:
                    break
                ret += gamma**k * rewards[s + k, e]
                m += 1
                if term[s + k, e] or trunc[s + k, e]:
                    ended, terminated = True, bool(term[s + k, e])
                    break
            if ended or m == n:
                out.append((K * e + s, 7 * (K * e + s), ret, 0.0 if terminated else gamma**m, K * e + s + m))
    return sorted(out)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_against_reference(seed):
    rng = np.random.default_rng(seed)
    E, T, n, gamma = 4, 200, 3, 0.9
    rewards = rng.normal(size=(T, E))
    term = rng.random((T, E)) < 0.08
    trunc = rng.random((T, E)) < 0.04
    prev = np.zeros(E, bool)
    for t in range(T):  # make the stream gymnasium-like: reset steps have reward 0 and no done
        rewards[t, prev] = 0.0
        term[t, prev] = trunc[t, prev] = False
        prev = term[t] | trunc[t]
    steps = make_stream(rewards, term, trunc)
    f = new_folder(n, gamma, E, chunk_steps=10)
    pops = sorted(set(rng.integers(1, T, size=12).tolist()) | {T})
    got, done = [], 0
    for upto in pops:
        feed(f, steps[done:upto])
        done = upto
        got += rows(f.pop())
        expected = reference(n, gamma, rewards, term, trunc, upto)
        assert len(got) == len(expected)
        for g, x in zip(sorted(got), expected):
            assert g[0] == x[0] and g[1] == x[1] and g[4] == x[4]
            assert g[2] == pytest.approx(x[2], rel=1e-5, abs=1e-5) and g[3] == pytest.approx(x[3], rel=1e-6)
        valid_steps = sum(1 for e in range(E) for s in range(upto)
                          if s == 0 or not (term[s - 1, e] or trunc[s - 1, e]))
        assert len(got) + f.pending == valid_steps


def test_cartpole_vector_env():
    n, g, E, T = 3, 0.9, 4, 300
    env = gym.make_vec("CartPole-v1", num_envs=E)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    f = NStepFolder(n, g, E, env.single_observation_space.shape, np.float32, chunk_steps=50)
    outs, valid_obs, reset_obs, prev_done, valid_steps = [], [], [], np.zeros(E, bool), 0
    for t in range(T):
        action = rng.integers(0, 2, size=E)
        next_obs, reward, term, trunc, _ = env.step(action)
        f.add_step(obs, action, reward, term, trunc, next_obs)
        valid_steps += int((~prev_done).sum())
        valid_obs += [o.tobytes() for o in obs[~prev_done]]
        reset_obs += [o.tobytes() for o in obs[prev_done]]  # final obs fed again on the reset step
        prev_done = term | trunc
        obs = next_obs
        if (t + 1) % 50 == 0 or t == 17:
            outs.append(f.pop())
    env.close()
    assert len(reset_obs) > 0  # some episodes ended, so autoreset was exercised
    ret = np.concatenate([o["return"] for o in outs])
    disc = np.concatenate([o["discount"] for o in outs])
    emitted_obs = [o.tobytes() for out in outs for o in out["obs"]]
    assert len(ret) + f.pending == valid_steps
    sums = np.cumsum(g ** np.arange(n))  # m-step sums of 1.0 rewards: 1, 1+g, 1+g+g^2
    m = np.argmin(np.abs(ret[:, None] - sums[None, :]), axis=1) + 1
    np.testing.assert_allclose(ret, sums[m - 1], rtol=1e-6)
    bootstrapped = disc > 0
    np.testing.assert_allclose(disc[bootstrapped], (g**m)[bootstrapped], rtol=1e-6)  # discount g^m
    assert np.all(m[~bootstrapped] >= 1) and np.all(disc[~bootstrapped] == 0.0)
    assert not Counter(emitted_obs) - Counter(valid_obs)  # each emitted obs is a distinct real step
    assert not set(emitted_obs) & set(reset_obs)
