"""IQN as the learner's algorithm: DQN's update (learner/dqn_step.py) with the implicit quantile
network and its loss at drawn fractions (learner/implicit_quantile_networks.py,
learner/quantile_loss.py); algo.quantiles fractions per transition, online and target alike."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from raypex.learner.dqn_step import DQNStep
from raypex.learner.encoders import encoder_from
from raypex.learner.implicit_quantile_networks import ImplicitQuantileNetwork
from raypex.learner.losses import LossOutput
from raypex.learner.quantile_loss import implicit_quantile_loss
from raypex.learner.settings import LearnerSettings
from raypex.replay.contracts import indexed


class IQNStep(DQNStep):
    """DQN's step over quantiles at drawn fractions; its policy is the online network, whose forward
    is the mean Q over fixed fractions."""

    kind = "iqn"
    loss_function = staticmethod(implicit_quantile_loss)  # compiled whole with learner.compile (DQNStep.loss_fn)

    def build_network(self, settings: LearnerSettings) -> nn.Module:
        return ImplicitQuantileNetwork(settings.obs_shape, settings.num_actions, settings.hidden, settings.dueling,
                                       settings.obs_dtype, settings.critic_norm == "layer_norm",
                                       encoder_from(settings), settings.quantiles)

    def micro_batch_loss(self, batch: Mapping[str, torch.Tensor], g: int) -> LossOutput:
        return self.loss_fn(self.online, self.target, indexed(batch["obs"], g), batch["action"][g],
                            batch["return"][g], batch["discount"][g], indexed(batch["next_obs"], g),
                            batch["weight"][g] if self.s.prioritized else None, self.s.huber_delta,
                            self.s.quantiles, self.s.double_dqn)
