"""Q-networks: an MLP for flat observations and the Nature-DQN CNN for stacked pixel frames,
each with an optional dueling head.

Collectors build the same network on CPU to act; the learner builds it on its device to train.
Pixel batches arrive as uint8 and are scaled to [0, 1] inside `forward`, that is on the device the
network lives on: what crosses Ray and the host->device copy is a quarter of the float32 size.
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


class NatureCNNQNetwork(nn.Module):
    """The Nature-DQN torso (Mnih et al. 2015: 32x8x8/4, 64x4x4/2, 64x3x3/1 convolutions) and
    fully connected `hidden` layers; maps frame stacks [B, stack, H, W] (uint8 0..255 or float
    in the same range) to Q-values [B, num_actions]."""

    def __init__(self, obs_shape: tuple[int, int, int], num_actions: int, hidden: list[int], dueling: bool):
        super().__init__()
        channels, height, width = obs_shape
        self.convs = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            width = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.head = MLPQNetwork(width, num_actions, hidden, dueling)
        self.channels_last = False

    def use_channels_last(self, enabled: bool) -> NatureCNNQNetwork:
        """Keep weights and activations channels-last (NHWC): what tensor-core convolutions read
        natively on a GPU. The frames are reordered while still uint8, a quarter of the bytes."""
        self.channels_last = enabled
        return self.to(memory_format=torch.channels_last if enabled else torch.contiguous_format)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            obs = obs.contiguous(memory_format=torch.channels_last)
        return self.head(self.convs(obs.float() * (1.0 / 255.0)))


def build_q_network(obs_shape: tuple[int, ...], num_actions: int, hidden: list[int], dueling: bool) -> nn.Module:
    """The Q-network for an observation shape: MLP for flat vectors, Nature CNN for frame stacks."""
    if len(obs_shape) == 1:
        return MLPQNetwork(obs_shape[0], num_actions, hidden, dueling)
    if len(obs_shape) == 3:
        if min(obs_shape[1:]) < 36:
            raise ValueError(f"the Nature CNN needs frames of at least 36x36, got {obs_shape[1:]}")
        return NatureCNNQNetwork(obs_shape, num_actions, hidden, dueling)
    raise ValueError(f"no Q-network for observations of shape {obs_shape}")


def greedy_actions(network: nn.Module, obs: np.ndarray) -> np.ndarray:
    """argmax_a Q(obs, a) for a numpy batch on the CPU, without autograd (acting, evaluation)."""
    with torch.inference_mode():
        return network(torch.from_numpy(obs)).argmax(dim=1).numpy()
