"""QR-DQN (Dabney et al. 2018): DQN's plug-in with a distribution of N quantiles per action in
place of one Q-value (learner/qrdqn_step.py). It acts as DQN does (actors/q_policy.py), on the
mean of the quantiles, which is its network's forward."""

from __future__ import annotations

from raypex.learner.algorithms.dqn import DQN
from raypex.learner.algorithms.registry import register


@register
class QRDQN(DQN):
    name = "qrdqn"

    def build_step(self, settings, device, gather=None, precision=None):
        from raypex.learner.qrdqn_step import QRDQNStep

        return QRDQNStep(settings, device, gather, precision)

    def acting_network(self, settings):
        from raypex.learner.encoders import encoder_from
        from raypex.learner.quantile_networks import QuantileQNetwork

        s = settings
        return QuantileQNetwork(s.obs_shape, s.num_actions, s.quantiles, s.hidden, s.dueling, s.obs_dtype,
                                s.layer_norm, encoder_from(s))
