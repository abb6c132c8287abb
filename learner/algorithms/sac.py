"""SAC (Haarnoja et al., 2018): a squashed-Gaussian actor that explores by sampling, twin
critics, and an entropy temperature tuned toward a target entropy (learner/actor_critic_step.py
with the SAC objective of learner/actor_objectives.py)."""

from __future__ import annotations

from raypex.learner.algorithms.actor_acting import ActorActing
from raypex.learner.algorithms.registry import register


@register
class SAC(ActorActing):
    name = "sac"
    gaussian = True

    def build_step(self, settings, device, gather=None, precision=None):
        from raypex.learner.actor_critic_step import ActorCriticStep
        from raypex.learner.actor_objectives import SACObjective

        return ActorCriticStep(settings, device, gather, precision, objective=SACObjective(settings, device))
