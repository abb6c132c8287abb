"""Q-networks: an MLP for flat observations, with an optional dueling head.

Collectors build the same network on CPU to act; the learner builds it on its device to train.
"""

from __future__ import annotations

import torch
from torch import nn


class MLPQNetwork(nn.Module):
    """Maps a float32 batch of flat observations [B, obs_dim] to Q-values [B, num_actions]."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: list[int], dueling: bool):
        super().__init__()
        layers: list[nn.Module] = []
        width = obs_dim
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.torso = nn.Sequential(*layers)
        self.dueling = dueling
        self.advantage = nn.Linear(width, num_actions)
        self.value = nn.Linear(width, 1) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.torso(obs.float())
        advantage = self.advantage(features)
        if self.value is None:
            return advantage
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)


def build_q_network(obs_shape: tuple[int, ...], num_actions: int, hidden: list[int], dueling: bool) -> nn.Module:
    """The Q-network for an observation shape (flat vectors only for now)."""
    if len(obs_shape) != 1:
        raise ValueError(f"MLP Q-network needs flat observations, got shape {obs_shape}")
    return MLPQNetwork(obs_shape[0], num_actions, hidden, dueling)
