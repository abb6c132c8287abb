"""The collector's env part (actors/env_stepper.py): steps checked, episodes counted and drained,
the running step readable from another thread."""

import numpy as np
import pytest

from raypex.actors.env_stepper import EnvStepper
from raypex.actors.step_check import EnvWentBad


def test_a_step_moves_obs_on_and_counts_each_real_step_of_an_episode():
    stepper = EnvStepper("CartPole-v1", 3, {}, 0, seed=0, who="collector 0")
    first = stepper.obs
    next_obs, reward, terminated, truncated, _ = stepper.step(np.zeros(3, np.int64))
    assert stepper.obs is next_obs and not np.array_equal(next_obs, first) and stepper.first_step_at is not None
    assert stepper.running_s() == 0.0  # between steps
    stepper.count_episodes(reward, np.array([False, True, False]), np.array([True, True, False]))
    assert stepper.finished_episodes() == ([1.0], [1])  # env 1 ended after one real step; env 2's was no step
    assert stepper.finished_episodes() == ([], [])  # drained
    assert stepper.episode_length.tolist() == [1, 0, 0]
    stepper.close()


def test_a_step_that_goes_bad_names_the_env_and_who_stepped_it():
    stepper = EnvStepper("CartPole-v1", 2, {}, 0, seed=0, who="collector 3")
    stepper.env.step = lambda actions: (stepper.obs, np.array([np.nan, 1.0]), np.zeros(2, bool), np.zeros(2, bool), {})
    with pytest.raises(EnvWentBad, match="collector 3"):
        stepper.step(np.zeros(2, np.int64))
    stepper.close()
