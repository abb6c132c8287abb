"""Epsilon-greedy exploration over Discrete actions, as Ape-X spreads it over the collectors: the
policies of DQN and R2D2 use it (actors/q_policy.py, actors/recurrent_acting.py).

Collector i of N acts with eps_i = eps_base ** (1 + alpha * i / (N - 1)) (eps_base for N = 1), so
the fleet spans from exploratory to nearly greedy. With `anneal_steps` > 0, epsilon starts at 1.0
and falls linearly to eps_i over the collector's first `anneal_steps` env steps.
"""

from __future__ import annotations

import numpy as np

from raypex.actors.settings import CollectorSettings


def apex_epsilon(index: int, num_collectors: int, base: float, alpha: float) -> float:
    """The Ape-X epsilon of collector `index` among `num_collectors`."""
    if not 0 <= index < num_collectors:
        raise ValueError(f"collector index {index} outside 0..{num_collectors - 1}")
    if num_collectors == 1:
        return base
    return base ** (1.0 + alpha * index / (num_collectors - 1))


def annealed_epsilon(final: float, env_steps: int, anneal_steps: int) -> float:
    """Epsilon after `env_steps`: linear from 1.0 to `final` over `anneal_steps` (0 = no anneal)."""
    if anneal_steps <= 0 or env_steps >= anneal_steps:
        return final
    return 1.0 + (final - 1.0) * env_steps / anneal_steps


class EpsilonGreedy:
    """A uniformly random action with probability epsilon, else the greedy one."""

    def __init__(self, num_actions: int, final_epsilon: float, anneal_steps: int, rng: np.random.Generator):
        self.num_actions = num_actions
        self.final_epsilon = final_epsilon
        self.anneal_steps = anneal_steps
        self.rng = rng

    def rate(self, env_steps: int) -> float:
        """The epsilon after `env_steps`."""
        return annealed_epsilon(self.final_epsilon, env_steps, self.anneal_steps)

    def choose(self, greedy: np.ndarray, env_steps: int) -> np.ndarray:
        """`greedy` with each action replaced by a random one at the current epsilon."""
        explore = self.rng.random(len(greedy)) < self.rate(env_steps)
        return np.where(explore, self.rng.integers(0, self.num_actions, len(greedy)), greedy)


def collector_epsilon(s: CollectorSettings, rng: np.random.Generator) -> EpsilonGreedy:
    """Collector `s.index`'s epsilon-greedy: Ape-X's epsilon for its place in the spread, annealed from 1.0 as configured."""
    place = s.index if s.exploration_index is None else s.exploration_index
    final = apex_epsilon(place, s.num_collectors, s.epsilon_base, s.epsilon_alpha)
    return EpsilonGreedy(s.num_actions, final, s.epsilon_anneal_steps, rng)
