"""DQN (Ape-X's: double, dueling, n-step, prioritized, distributed collection): a Q-network over
Discrete actions (learner/dqn_step.py), epsilon-greedy in collectors (actors/q_policy.py)."""

from __future__ import annotations

from raypex.learner.algorithms.registry import Algorithm, register


@register
class DQN(Algorithm):
    name = "dqn"
    acts_on_gpu = True  # a CNN's forward over a collector's envs is worth a GPU launch

    def build_step(self, settings, device, gather=None, precision=None):
        from raypex.learner.dqn_step import DQNStep

        return DQNStep(settings, device, gather, precision)

    def acting_network(self, settings):
        from raypex.actors.q_policy import q_network

        return q_network(settings)

    def policy(self, settings, example_obs, seed, rng, served=None):
        from raypex.actors.q_policy import collector_q_policy

        return collector_q_policy(settings, example_obs, seed, rng, served)

    def greedy_policy(self, settings):
        from raypex.actors.q_policy import greedy_q_policy

        return greedy_q_policy(settings)
