"""StepCheck (actors/step_check.py) against hand-made steps: each fault is one line naming the env,
its index, the step of its episode and what it returned; finite values, however large, are not
faults; a vector env that could not stack an observation of another shape is explained."""

import gymnasium as gym
import numpy as np
import pytest

from raypex.actors.step_check import EnvWentBad, StepCheck


def check(dtype=np.float32) -> StepCheck:
    return StepCheck("Mine-v0", np.zeros((1, 3), dtype), "collector 1")


STEPS = np.array([4, 9, 0])  # each env's steps so far in its episode


def test_finite_steps_pass_even_when_their_sum_overflows():
    huge = np.full((3, 3), 3e38, np.float32)  # finite, though their float32 sum would be inf
    check()(huge, np.array([1.0, -2.0, 0.0]), STEPS)
    larger = np.full((3, 3), 1e308)  # float64 ones whose sum is inf: looked at closely, and passed
    with np.errstate(over="ignore"):
        StepCheck("Mine-v0", np.zeros((1, 3)), "collector 1")(larger, np.zeros(3), STEPS)
    check(np.uint8)(np.zeros((3, 3), np.uint8), np.zeros(3), STEPS)


@pytest.mark.parametrize(("obs", "reward", "line"), [
    (np.zeros((3, 3)), np.array([0.0, np.nan, 0.0]),
     "env.id Mine-v0: env 1 of collector 1 returned a reward of nan at step 10 of its episode"),
    (np.zeros((3, 3)), np.array([0.0, 0.0, -np.inf]),
     "env.id Mine-v0: env 2 of collector 1 returned a reward of -inf at step 1 of its episode"),
    (np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, np.inf, 0.0]]), np.zeros(3),
     ("env.id Mine-v0: env 2 of collector 1 returned an observation holding inf (at flat index 1) at step 1 of its "
     "episode")),
    (np.zeros((3, 4)), np.zeros(3),
     ("env.id Mine-v0: env 0 of collector 1 returned observations of shape [4], where its space has [3] at step 5 "
     "of its episode")),
])
def test_each_fault_is_one_line_naming_the_env_and_its_step(obs, reward, line):
    with pytest.raises(EnvWentBad) as err:
        check()(obs.astype(np.float32), reward, STEPS)
    assert str(err.value) == line


class Grows(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 0.0, False, False, {}


def test_a_vector_env_that_cannot_stack_an_observation_of_another_shape_is_explained():
    env = gym.vector.SyncVectorEnv([Grows, Grows, Grows])
    env.reset(seed=0)
    with pytest.raises(ValueError) as failed:
        env.step(np.zeros(3, np.int64))
    explained = check().explain(env, failed.value, STEPS)
    assert str(explained) == ("env.id Mine-v0: env 0 of collector 1 returned an observation of shape [4], where its "
                              "space has [3] at step 5 of its episode")


class GrowsImage(gym.Env):
    """MinAtar-like channels-last images that gain a channel after the first step; `parts`: the same
    image as the "frame" part of a Dict."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, parts: bool = False):
        image = gym.spaces.Box(0, 1, (5, 5, 2), np.uint8)
        self.parts = parts
        self.observation_space = gym.spaces.Dict({"frame": image, "turn": gym.spaces.Box(0, 1, (2,))}) if parts \
            else image

    def _obs(self, channels: int):
        image = np.zeros((5, 5, channels), np.uint8)
        return {"frame": image, "turn": np.zeros(2, np.float32)} if self.parts else image

    def reset(self, *, seed=None, options=None):
        return self._obs(2), {}

    def step(self, action):
        return self._obs(3), 0.0, False, False, {}


@pytest.mark.parametrize(("parts", "what"), [(False, "an observation of shape [5, 5, 3], where its space has [5, 5, 2]"),
                                             (True, "an observation part 'frame' of shape [5, 5, 3], where its space "
                                                    "has [5, 5, 2]")])
def test_a_converted_vector_env_is_explained_by_the_envs_own_observations(parts, what):
    """Behind raypex's conversion (channels first, parts) the env's own shapes are compared."""
    from raypex.actors.envs import make_vector_env

    env = make_vector_env("tests.test_step_check:GrowsImage", 2, {"parts": parts})
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError) as failed:
        env.step(np.zeros(2, np.int64))
    explained = StepCheck("Grows-v0", obs, "the evaluator").explain(env, failed.value, STEPS)
    assert str(explained) == f"env.id Grows-v0: env 0 of the evaluator returned {what} at step 5 of its episode"
    env.close()
