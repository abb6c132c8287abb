"""QR-DQN's network: for each action, N quantiles of the return's distribution (Dabney et al. 2018,
"Distributional Reinforcement Learning with Quantile Regression").

It is DQN's network (learner/networks.py: the MLP, a CNN or the user's encoder, then `hidden`)
with A x N outputs, and with a dueling head a value's N besides: Z(s, a) = V(s) + A(s, a) - mean_a
A(s, a), quantile by quantile. Its `forward` is the mean over the quantiles, the Q-values: so
collectors, the evaluator, the acting graph, an acting server and policy.pt2 take it as they take
DQN's Q-network, and only the learner asks for `quantiles`.
"""

from __future__ import annotations

import torch
from torch import nn

from raypex.learner.networks import build_q_network


class QuantileQNetwork(nn.Module):
    """obs [B, ...] -> Q-values [B, A] (`forward`) or quantiles [B, A, N] (`quantiles`)."""

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, quantiles: int, hidden: list[int], dueling: bool,
                 obs_dtype: str = "uint8", layer_norm: bool = False, encoder: nn.Module | None = None):
        super().__init__()
        self.num_actions, self.num_quantiles, self.dueling = num_actions, quantiles, dueling
        outputs = num_actions * quantiles + (quantiles if dueling else 0)
        self.body = build_q_network(obs_shape, outputs, hidden, False, obs_dtype, layer_norm, encoder)

    def quantiles(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.body(obs)
        per_action = out[:, : self.num_actions * self.num_quantiles].reshape(-1, self.num_actions, self.num_quantiles)
        if not self.dueling:
            return per_action
        value = out[:, self.num_actions * self.num_quantiles:].unsqueeze(1)
        return value + per_action - per_action.mean(dim=1, keepdim=True)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.quantiles(obs).mean(dim=2)
