"""What TD3's and SAC's plug-ins share: an actor over Box actions, which collectors and the evaluator
act with through actors/continuous_acting.py. Registers no algorithm itself."""

from __future__ import annotations

from raypex.learner.algorithms.registry import Algorithm


class ActorActing(Algorithm):
    """A plug-in acting with an actor; `gaussian`: the actor samples a squashed Gaussian (SAC's),
    else collectors add Gaussian noise to its actions (TD3's)."""

    box_actions = True
    gaussian: bool

    @property
    def acting_outputs(self) -> tuple[str, ...]:
        """The deterministic action; a Gaussian actor's mean and log std besides, to sample around."""
        return ("actions", "mean", "log_std") if self.gaussian else ("actions",)

    def acting_network(self, settings):
        from raypex.learner.actor_critic_networks import ActorNetwork
        from raypex.learner.encoders import user_encoder

        s = settings
        return ActorNetwork(tuple(s.obs_shape), s.action_dim, s.hidden, self.gaussian, s.obs_dtype,
                            encoder=user_encoder(s))

    def acting_module(self, network):
        from raypex.learner.actor_critic_networks import ActorOutputs

        return ActorOutputs(network)

    def policy(self, settings, example_obs, seed, rng, served=None):
        from raypex.actors.continuous_acting import collector_actor_policy

        return collector_actor_policy(settings, seed, self.gaussian, served)

    def greedy_policy(self, settings):
        from raypex.actors.continuous_acting import greedy_actor_policy

        return greedy_actor_policy(settings, gaussian=self.gaussian)
