"""TD3 (Fujimoto et al., 2018): a deterministic actor explored with Gaussian noise, twin critics,
target policy smoothing and delayed actor updates (learner/actor_critic_step.py with the TD3
objective of learner/actor_objectives.py)."""

from __future__ import annotations

from raypex.learner.algorithms.registry import Algorithm, register


@register
class TD3(Algorithm):
    name = "td3"
    box_actions = True
    collector_noise = True
    default_policy_delay = 2  # the paper's

    def build_step(self, settings, device, gather=None, precision=None):
        from raypex.learner.actor_critic_step import ActorCriticStep
        from raypex.learner.actor_objectives import TD3Objective

        return ActorCriticStep(settings, device, gather, precision, objective=TD3Objective(settings))

    def acting_network(self, settings):
        from raypex.learner.actor_critic_networks import ActorNetwork

        s = settings
        return ActorNetwork(tuple(s.obs_shape), s.action_dim, s.hidden, False, s.obs_dtype)

    def policy(self, settings, example_obs, seed, rng):
        from raypex.actors.continuous_acting import collector_actor_policy

        return collector_actor_policy(settings, seed, gaussian=False)

    def greedy_policy(self, settings):
        from raypex.actors.continuous_acting import greedy_actor_policy

        return greedy_actor_policy(settings, gaussian=False)
