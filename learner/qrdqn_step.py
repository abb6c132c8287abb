"""QR-DQN as the learner's algorithm: DQN's update (learner/dqn_step.py: micro-batches, precision,
clipping, targets, capture) with the quantile network and the quantile Huber loss in place of the
Q-network and the Huber loss on Q (learner/quantile_networks.py, learner/quantile_loss.py)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from raypex.learner.dqn_step import DQNStep
from raypex.learner.encoders import encoder_from
from raypex.learner.losses import LossOutput
from raypex.learner.quantile_loss import quantile_dqn_loss
from raypex.learner.quantile_networks import QuantileQNetwork
from raypex.learner.settings import LearnerSettings
from raypex.replay.contracts import indexed


class QRDQNStep(DQNStep):
    """DQN's step over quantiles; its policy is the online network, whose forward is the mean Q."""

    kind = "qrdqn"
    loss_function = staticmethod(quantile_dqn_loss)  # compiled whole with learner.compile (DQNStep.loss_fn)

    def build_network(self, settings: LearnerSettings) -> nn.Module:
        return QuantileQNetwork(settings.obs_shape, settings.num_actions, settings.quantiles, settings.hidden,
                                settings.dueling, settings.obs_dtype, settings.critic_norm == "layer_norm",
                                encoder_from(settings))

    def micro_batch_loss(self, batch: Mapping[str, torch.Tensor], g: int) -> LossOutput:
        return self.loss_fn(self.online, self.target, indexed(batch["obs"], g), batch["action"][g], batch["return"][g],
                            batch["discount"][g], indexed(batch["next_obs"], g),
                            batch["weight"][g] if self.s.prioritized else None, self.s.huber_delta,
                            self.s.double_dqn)
