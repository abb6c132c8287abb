"""How a collector explores: one object per kind of action, so the collector's loop has no
branch on the algorithm.

DQN (`EpsilonGreedy`), Ape-X: collector i of N acts with eps_i = eps_base ** (1 + alpha * i / (N - 1))
(eps_base for N = 1), so the fleet spans from exploratory to nearly greedy. With `anneal_steps` > 0,
epsilon starts at 1.0 and falls linearly to eps_i over the collector's first `anneal_steps` env steps.

TD3 and SAC (`BoxExploration`): the acting policy explores itself (TD3's Gaussian noise, SAC's
sampled actions, uniform actions until trained weights arrive: actors/continuous_acting.py); actions
stay in [-1, 1] for replay and are scaled to the env's bounds only for the env.
"""

from __future__ import annotations

import numpy as np

from raypex.actors.action_scaling import ActionScale


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

    kind = "epsilon"  # what `rate` is, in TensorBoard's collector/ tags
    # Epsilon-greedy acts with any network, a fresh learner's untrained one too (Ape-X style).
    acts_with_untrained_weights = True

    def __init__(self, num_actions: int, final_epsilon: float, anneal_steps: int, rng: np.random.Generator):
        self.num_actions = num_actions
        self.final_epsilon = final_epsilon
        self.anneal_steps = anneal_steps
        self.rng = rng

    def rate(self, env_steps: int) -> float:
        """The epsilon after `env_steps`."""
        return annealed_epsilon(self.final_epsilon, env_steps, self.anneal_steps)

    def act(self, policy, obs: np.ndarray, env_steps: int) -> np.ndarray:
        """Actions for a batch of observations from the policy's greedy ones."""
        return self.choose(policy.greedy(obs), env_steps)

    def choose(self, greedy: np.ndarray, env_steps: int) -> np.ndarray:
        """`greedy` with each action replaced by a random one at the current epsilon."""
        explore = self.rng.random(len(greedy)) < self.rate(env_steps)
        return np.where(explore, self.rng.integers(0, self.num_actions, len(greedy)), greedy)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """What the env is stepped with: the replay's actions themselves."""
        return actions


class BoxExploration:
    """Box actions from a policy that explores itself: TD3's noise or SAC's samples."""

    # A fresh learner's untrained actor would fill the warm-up with one near-constant action per
    # observation, so collectors keep acting uniformly at random until trained weights come.
    acts_with_untrained_weights = False

    def __init__(self, noise: float, low, high):
        self.kind = "noise" if noise else None  # a sampling head (SAC's) has no exploration rate
        self.noise = noise
        self.scale = ActionScale(low, high)

    def rate(self, env_steps: int) -> float:
        """The collector's action noise (0 for a head that samples)."""
        return self.noise

    def act(self, policy, obs: np.ndarray, env_steps: int) -> np.ndarray:
        """[B, action_dim] actions in [-1, 1], for replay."""
        return policy.explore(obs)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """The actions in the env's units."""
        return self.scale.to_env(actions)
