"""TD3 (Fujimoto et al., 2018): a deterministic actor explored with Gaussian noise, twin critics,
target policy smoothing and delayed actor updates (learner/actor_critic_step.py with the TD3
objective of learner/actor_objectives.py)."""

from __future__ import annotations

from raypex.learner.algorithms.actor_acting import ActorActing
from raypex.learner.algorithms.registry import register


@register
class TD3(ActorActing):
    name = "td3"
    gaussian = False
    collector_noise = True
    default_policy_delay = 2  # the paper's

    def build_step(self, settings, device, gather=None, precision=None):
        from raypex.learner.actor_critic_step import ActorCriticStep
        from raypex.learner.actor_objectives import TD3Objective

        return ActorCriticStep(settings, device, gather, precision, objective=TD3Objective(settings))
