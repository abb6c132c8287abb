"""IQN's network (Dabney et al. 2018, "Implicit Quantile Networks for Distributional Reinforcement
Learning"): the return's quantile Z_τ(s, a) at any fraction τ in [0, 1].

The observation's features ψ(s) (DQN's torso, learner/networks.py, with `hidden`'s last layer as
their width) are multiplied elementwise by an embedding of τ, φ(τ) = ReLU(Linear(cos(π i τ), i <
COSINES)), and a linear head (dueling with network.dueling) gives each action's quantile. The
learner asks for quantiles at fractions it draws (`quantiles`); the network's `forward`, what
collectors, the evaluator, the acting graph and policy.pt2 run, is the mean over `acting_quantiles`
fixed fractions (the midpoints of equal slices of [0, 1]): the Q-values, the same for the same
observation, so acting and its exported forms need no random numbers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from raypex.learner.networks import build_q_network
from raypex.replay.contracts import batch_size

COSINES = 64  # the embedding's cosines, as the IQN paper's


class ImplicitQuantileNetwork(nn.Module):
    """obs [B, ...] and fractions [B, T] -> quantiles [B, A, T] (`quantiles`); obs -> Q-values [B, A] (`forward`)."""

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden: list[int], dueling: bool,
                 obs_dtype: str = "uint8", layer_norm: bool = False, encoder: nn.Module | None = None,
                 acting_quantiles: int = 32):
        super().__init__()
        width = hidden[-1]
        self.features = build_q_network(obs_shape, width, hidden[:-1], False, obs_dtype, layer_norm, encoder)
        self.embedding = nn.Linear(COSINES, width)
        self.advantage = nn.Linear(width, num_actions)
        self.value = nn.Linear(width, 1) if dueling else None
        self.register_buffer("cosine_steps", torch.arange(COSINES, dtype=torch.float32) * math.pi)
        self.register_buffer("acting_fractions", (torch.arange(acting_quantiles, dtype=torch.float32) * 2 + 1)
                             / (2 * acting_quantiles))

    def embed(self, fractions: torch.Tensor) -> torch.Tensor:
        """φ(τ) [B, T, width] for fractions [B, T]."""
        cosines = torch.cos(fractions.unsqueeze(-1) * self.cosine_steps)
        return F.relu(self.embedding(cosines.to(self.embedding.weight.dtype)))

    def quantiles(self, obs: torch.Tensor, fractions: torch.Tensor) -> torch.Tensor:
        features = F.relu(self.features(obs))  # ψ(s) [B, width]
        merged = features.unsqueeze(1) * self.embed(fractions)  # [B, T, width]
        advantage = self.advantage(merged)  # [B, T, A]
        if self.value is not None:
            advantage = self.value(merged) + advantage - advantage.mean(dim=2, keepdim=True)
        return advantage.transpose(1, 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        fractions = self.acting_fractions.expand(batch_size(obs), -1)
        return self.quantiles(obs, fractions).mean(dim=2)
