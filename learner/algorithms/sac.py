"""SAC (Haarnoja et al., 2018): a squashed-Gaussian actor that explores by sampling, twin
critics, and an entropy temperature tuned toward a target entropy (learner/actor_critic_step.py
with the SAC objective of learner/actor_objectives.py)."""

from __future__ import annotations

from raypex.learner.algorithms.registry import Algorithm, register


@register
class SAC(Algorithm):
    name = "sac"
    box_actions = True

    def build_step(self, settings, device, gather=None, precision=None):
        from raypex.learner.actor_critic_step import ActorCriticStep
        from raypex.learner.actor_objectives import SACObjective

        return ActorCriticStep(settings, device, gather, precision, objective=SACObjective(settings, device))

    def acting_network(self, settings):
        from raypex.learner.actor_critic_networks import ActorNetwork

        s = settings
        return ActorNetwork(tuple(s.obs_shape), s.action_dim, s.hidden, True, s.obs_dtype)

    def policy(self, settings, example_obs, seed, rng):
        from raypex.actors.continuous_acting import collector_actor_policy

        return collector_actor_policy(settings, seed, gaussian=True)

    def greedy_policy(self, settings):
        from raypex.actors.continuous_acting import greedy_actor_policy

        return greedy_actor_policy(settings, gaussian=True)
