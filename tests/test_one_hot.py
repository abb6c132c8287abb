"""Symbol observations (Discrete, MultiDiscrete: POPGym's memory tasks) reach the networks one-hot;
a Dict or Tuple observation space is one line naming the space."""

import gymnasium as gym
import numpy as np
import pytest

from raypex.actors.env_ids import UnsupportedEnv
from raypex.actors.envs import inspect_env, make_vector_env
from raypex.actors.one_hot import OneHot

SYMBOLS_ENV = '''import gymnasium as gym


class Env(gym.Env):
    """Observes a symbol of SPACE; reward 1 for action 0."""

    def __init__(self):
        self.observation_space = SPACE
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.symbol = self.observation_space.sample()
        return self.symbol, {}

    def step(self, action):
        reward = float(action == 0)
        self.t += 1
        self.symbol = self.observation_space.sample()
        return self.symbol, reward, False, self.t >= 20, {}
'''


def test_a_discrete_value_is_a_one_hot_row_and_a_multidiscrete_one_a_row_per_part():
    discrete = OneHot(gym.spaces.Discrete(3, start=1))
    assert discrete.size == 3
    np.testing.assert_array_equal(discrete(np.array([1, 3, 2])), [[1, 0, 0], [0, 0, 1], [0, 1, 0]])
    multi = OneHot(gym.spaces.MultiDiscrete([2, 3]))
    assert multi.size == 5
    np.testing.assert_array_equal(multi(np.array([[1, 0], [0, 2]])), [[0, 1, 1, 0, 0], [1, 0, 0, 0, 1]])
    assert multi(np.array([[1, 2]])).dtype == np.float32
    with pytest.raises(ValueError, match=r"an observation of 3, outside its MultiDiscrete\(\[2 3\]\) observation space"):
        multi(np.array([[0, 3]]))


@pytest.mark.parametrize(("space", "size", "parts"), [("gym.spaces.Discrete(4)", 4, 1),
                                                     ("gym.spaces.MultiDiscrete([3, 2, 2])", 7, 3)])
def test_an_env_of_symbols_is_inspected_and_stepped_one_hot(tmp_path, monkeypatch, space, size, parts):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "symbols.py").write_text(SYMBOLS_ENV.replace("SPACE", space))
    spec = inspect_env("symbols.py:Env", {})
    assert (spec.obs_shape, spec.obs_dtype, spec.num_actions) == ((size,), "float32", 2)
    env = make_vector_env("symbols.py:Env", 3, {})
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, size) and obs.dtype == np.float32 and (obs.sum(axis=1) == parts).all()
    obs, *_ = env.step(np.array([0, 1, 0]))
    assert obs.shape == (3, size)
    env.close()


@pytest.mark.parametrize(("space", "parts"), [
    ("gym.spaces.Dict({'a': gym.spaces.Discrete(2)})", (("a", (2,), "float32"),)),
    ("gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiDiscrete([3, 2])))",
     (("0", (2,), "float32"), ("1", (5,), "float32"))),
])
def test_symbols_inside_a_dict_or_tuple_are_one_hot_parts(tmp_path, monkeypatch, space, parts):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nested.py").write_text(SYMBOLS_ENV.replace("SPACE", space))
    assert inspect_env("nested.py:Env", {}).obs_parts == parts


def test_a_space_raypex_cannot_learn_on_is_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.py").write_text(SYMBOLS_ENV.replace("SPACE", "gym.spaces.Text(5)"))
    with pytest.raises(UnsupportedEnv) as err:
        inspect_env("text.py:Env", {})
    assert str(err.value).startswith("env.id 'text.py:Env' has a Text observation space (Text(")
    assert str(err.value).endswith("raypex learns on Box, Discrete (one-hot), MultiDiscrete (one-hot per part), Dict "
                                   "and Tuple observations") and "\n" not in str(err.value)


def test_a_run_learns_from_symbols(tmp_path, monkeypatch, capsys):
    """Collectors, replay, learner and evaluator on one-hot observations (`--local`): action 0 pays,
    whatever the symbol, so a run of a few thousand steps finds it."""
    from raypex.cluster.commands.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "symbols.py").write_text(SYMBOLS_ENV.replace("SPACE", "gym.spaces.MultiDiscrete([3, 2])"))
    code = main(["train", "--local", "env.id=symbols.py:Env", "--run-dir", "run", "stop.env_steps=4000",
                 "stop.eval_return=19", "eval.every_env_steps=1000", "eval.video_every=0"])
    err = capsys.readouterr().err
    assert code == 0 and ", solved in " in err.splitlines()[-1], err
