"""The networks of TD3 and SAC: an MLP actor (deterministic, or SAC's squashed Gaussian) and twin
MLP critics Q1(s, a), Q2(s, a). Actions are in [-1, 1] (actors/action_scaling.py maps them to the
env's units). The actor's parameter names are what the collectors' and evaluator's numpy forward
reads (learner/numpy_mlp.py NumpyMLPActor); a test keeps the two equal.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from learner.numpy_mlp import squashed_log_std


def _torso(width: int, hidden: list[int]) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    return nn.Sequential(*layers), width


class MLPActor(nn.Module):
    """obs [B, obs_dim] -> tanh(mean) [B, action_dim]; with `gaussian`, also a log-std head for
    SAC's `sample`."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: list[int], gaussian: bool):
        super().__init__()
        self.torso, width = _torso(obs_dim, hidden)
        self.mean = nn.Linear(width, action_dim)
        self.log_std = nn.Linear(width, action_dim) if gaussian else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mean(self.torso(obs.to(self.mean.weight.dtype))))

    def sample(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(tanh(mean + std * noise), its log-probability [B]) for standard normal `noise`; the
        log-probability includes the tanh's change of variables."""
        features = self.torso(obs.to(self.mean.weight.dtype))
        mean = self.mean(features)
        log_std = squashed_log_std(self.log_std(features))
        pre_tanh = mean + log_std.exp() * noise
        gaussian_log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(dim=1)
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable where tanh saturates
        squash = (2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))).sum(dim=1)
        return torch.tanh(pre_tanh), gaussian_log_prob - squash


class TwinCritic(nn.Module):
    """Two independent MLPs of (obs, action) -> Q; forward returns both [B] Q-values."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: list[int]):
        super().__init__()
        self.q1_torso, width = _torso(obs_dim + action_dim, hidden)
        self.q2_torso, _ = _torso(obs_dim + action_dim, hidden)
        self.q1_out = nn.Linear(width, 1)
        self.q2_out = nn.Linear(width, 1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs.to(self.q1_out.weight.dtype), action.to(self.q1_out.weight.dtype)], dim=1)
        return self.q1_out(self.q1_torso(x)).squeeze(1), self.q2_out(self.q2_torso(x)).squeeze(1)


class ActionsInEnvUnits(nn.Module):
    """The deterministic actor with its [-1, 1] output mapped to the env's [low, high]: what
    policy.pt2 holds for TD3 and SAC."""

    def __init__(self, actor: MLPActor, low: tuple[float, ...], high: tuple[float, ...]):
        super().__init__()
        self.actor = actor
        low_t, high_t = torch.tensor(low, dtype=torch.float32), torch.tensor(high, dtype=torch.float32)
        self.register_buffer("center", (high_t + low_t) / 2)
        self.register_buffer("half_range", (high_t - low_t) / 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.center + self.half_range * self.actor(obs)
