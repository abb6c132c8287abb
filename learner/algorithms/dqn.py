"""DQN (Ape-X's: double, dueling, n-step, prioritized, distributed collection): a Q-network over
Discrete actions, epsilon-greedy in collectors (learner/dqn_step.py)."""

from __future__ import annotations

from raypex.learner.algorithms.registry import Algorithm, register


@register
class DQN(Algorithm):
    name = "dqn"
    head = "q"

    def build_step(self, settings, device, gather=None, precision=None):
        from raypex.learner.dqn_step import DQNStep

        return DQNStep(settings, device, gather, precision)
