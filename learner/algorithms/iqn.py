"""IQN (Dabney et al. 2018): DQN's plug-in learning the return's quantile at any fraction
(learner/iqn_step.py). It acts as DQN does (actors/q_policy.py), on the mean over fixed fractions,
which is its network's forward."""

from __future__ import annotations

from raypex.learner.algorithms.dqn import DQN
from raypex.learner.algorithms.registry import register


@register
class IQN(DQN):
    name = "iqn"

    def build_step(self, settings, device, gather=None, precision=None):
        from raypex.learner.iqn_step import IQNStep

        return IQNStep(settings, device, gather, precision)

    def acting_network(self, settings):
        from raypex.learner.encoders import encoder_from
        from raypex.learner.implicit_quantile_networks import ImplicitQuantileNetwork

        s = settings
        return ImplicitQuantileNetwork(s.obs_shape, s.num_actions, s.hidden, s.dueling, s.obs_dtype, s.layer_norm,
                                       encoder_from(s), s.quantiles)
