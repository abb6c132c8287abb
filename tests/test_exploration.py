"""Exploration: Ape-X's epsilon-greedy (actors/exploration.py) and an actor's noise (actors/continuous_acting.py)."""

import numpy as np
import pytest

from raypex.actors.continuous_acting import ActorPolicy
from raypex.actors.exploration import EpsilonGreedy, annealed_epsilon, apex_epsilon


def test_apex_epsilons_span_from_the_base_to_base_to_the_one_plus_alpha():
    eps = [apex_epsilon(i, 8, 0.4, 7.0) for i in range(8)]
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4**8)
    assert eps == sorted(eps, reverse=True)
    assert apex_epsilon(0, 1, 0.4, 7.0) == 0.4
    with pytest.raises(ValueError, match="outside 0..7"):
        apex_epsilon(8, 8, 0.4, 7.0)


def test_epsilon_anneals_linearly_from_one_then_stays():
    assert annealed_epsilon(0.1, 0, 100) == 1.0
    assert annealed_epsilon(0.1, 50, 100) == pytest.approx(0.55)
    assert annealed_epsilon(0.1, 100, 100) == annealed_epsilon(0.1, 10**6, 100) == 0.1
    assert annealed_epsilon(0.1, 0, 0) == 0.1


def test_epsilon_greedy_replaces_greedy_actions_at_its_rate():
    obs = np.zeros((20_000, 4))
    greedy_only = EpsilonGreedy(5, 0.0, 0, np.random.default_rng(0))
    assert (greedy_only.choose(np.full(len(obs), 2), env_steps=0) == 2).all()
    explorer = EpsilonGreedy(5, 0.3, 0, np.random.default_rng(0))
    actions = explorer.choose(np.full(len(obs), 2), env_steps=0)
    # 30% uniform over 5 actions: 0.3 * 0.8 of them differ from the greedy one
    assert np.mean(actions != 2) == pytest.approx(0.24, abs=0.015)
    assert set(np.unique(actions)) == {0, 1, 2, 3, 4}
    annealing = EpsilonGreedy(5, 0.0, 1_000, np.random.default_rng(0))
    assert annealing.rate(0) == 1.0 and np.mean(annealing.choose(np.full(len(obs), 2), env_steps=0) != 2) > 0.75


def test_an_actors_noise_is_its_exploration_rate_and_it_waits_for_trained_weights():
    td3 = ActorPolicy(False, 2, 0.2, np.random.default_rng(0))
    assert td3.exploration == "noise" and td3.exploration_rate(10) == 0.2 and not td3.acts_with_untrained_weights
    sac = ActorPolicy(True, 1, 0.0, np.random.default_rng(0))
    assert sac.exploration is None and sac.exploration_rate(10) == 0.0
    actions, extras, state = td3.act(np.zeros((5, 3), np.float32), None, 0)  # the warm-up: no weights yet
    assert actions.shape == (5, 2) and np.abs(actions).max() <= 1.0 and extras == {} and state is None
