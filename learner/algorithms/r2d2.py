"""R2D2 (Kapturowski et al., ICLR 2019): a recurrent Q-network over Discrete actions, trained on
replayed sequences from the state each was collected with, after a burn-in (learner/r2d2_step.py);
collectors act epsilon-greedily with a state per env (actors/recurrent_acting.py) and store
sequences (replay/sequences.py)."""

from __future__ import annotations

from raypex.learner.algorithms.registry import Algorithm, observation_spec, register


@register
class R2D2(Algorithm):
    name = "r2d2"
    sequences = True
    capturable = False  # the unroll's Python loop over a sequence is not captured yet: eager on a GPU
    acting_inputs = ("obs", "state")
    acting_outputs = ("q_values", "state_out")

    def batch_spec(self, settings):
        """Sequences of `sequence_length` steps, [G, B, T, ...], and each one's stored state."""
        steps = settings.sequence_length
        spec = {**observation_spec(settings, ("obs",), (steps,)), "action": ((steps,), "int32"),
                "reward": ((steps,), "float32"), "discount": ((steps,), "float32"), "first": ((steps,), "bool"),
                "state": ((2 * settings.recurrent_size,), "float32")}
        if settings.prioritized:
            spec["weight"] = ((), "float32")
        return spec

    def build_step(self, settings, device, gather=None, precision=None):
        from raypex.learner.r2d2_step import R2D2Step

        return R2D2Step(settings, device, gather, precision)

    def acting_network(self, settings):
        from raypex.learner.encoders import encoder_from
        from raypex.learner.recurrent_networks import RecurrentQNetwork

        s = settings
        return RecurrentQNetwork(tuple(s.obs_shape), s.num_actions, s.hidden, s.recurrent_size, s.dueling,
                                 obs_dtype=s.obs_dtype, encoder=encoder_from(s))

    def acting_module(self, network):
        """A step: (obs, h and c side by side) -> (Q-values, the next state)."""
        from raypex.learner.recurrent_networks import StatefulQ

        return StatefulQ(network)

    def policy(self, settings, example_obs, seed, rng, served=None):
        from raypex.actors.recurrent_acting import collector_recurrent_policy

        return collector_recurrent_policy(settings, seed, rng, served)

    def greedy_policy(self, settings):
        from raypex.actors.recurrent_acting import greedy_recurrent_policy

        return greedy_recurrent_policy(settings)
