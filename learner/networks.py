"""Q-networks: an MLP for flat observations, with an optional dueling head.

Collectors build the same network on CPU to act; the learner builds it on its device to train.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
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
        self._hidden_layers = [layer for layer in layers if isinstance(layer, nn.Linear)]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # F.linear on the layers' own parameters instead of calling each nn.Module: for a network
        # this small the per-module call overhead is a large share of the learner's update time.
        features = obs.float()
        for layer in self._hidden_layers:
            features = F.relu(F.linear(features, layer.weight, layer.bias))
        advantage = F.linear(features, self.advantage.weight, self.advantage.bias)
        if self.value is None:
            return advantage
        value = F.linear(features, self.value.weight, self.value.bias)
        return value + advantage - advantage.mean(dim=1, keepdim=True)


def build_q_network(obs_shape: tuple[int, ...], num_actions: int, hidden: list[int], dueling: bool) -> nn.Module:
    """The Q-network for an observation shape (flat vectors only for now)."""
    if len(obs_shape) != 1:
        raise ValueError(f"MLP Q-network needs flat observations, got shape {obs_shape}")
    return MLPQNetwork(obs_shape[0], num_actions, hidden, dueling)


def greedy_actions(network: nn.Module, obs: np.ndarray) -> np.ndarray:
    """argmax_a Q(obs, a) for a numpy batch on the CPU, without autograd (acting, evaluation)."""
    with torch.inference_mode():
        return network(torch.from_numpy(obs)).argmax(dim=1).numpy()
