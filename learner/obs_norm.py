"""RunningObsNorm: observation normalization for TD3 and SAC on flat observations
(`network.obs_norm`), as a module inside the networks.

The statistics are buffers of the actor (and of the critics and targets, which get copies), so
they travel with everything the actor's weights already travel with: published weights (the
acting graph collectors and the evaluator run holds the normalization, learner/acting_graph.py), checkpoints and
policy.pt2, which therefore takes observations in the env's own units. The learner updates them
from every batch it trains on, with tensor ops only (no value read back), so the update stays one
capturable CUDA graph.
"""

from __future__ import annotations

import torch
from torch import nn

from raypex.learner.gradient_group import GradientGroup

NORM_EPS = 1e-8  # normalized observations are (obs - mean) / sqrt(var + NORM_EPS),
NORM_CLIP = 10.0  # clipped to +-NORM_CLIP
PRIOR_COUNT = 1e-4  # the prior's weight: the first batch sets the statistics almost alone


class RunningObsNorm(nn.Module):
    """(obs - mean) / sqrt(var + eps), clipped, with mean and var running over every observation
    `update` has seen (the parallel merge of Chan et al., exact for any batch sizes)."""

    def __init__(self, obs_dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("var", torch.ones(obs_dim))
        self.register_buffer("count", torch.tensor(PRIOR_COUNT))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        scaled = (obs.to(self.mean.dtype) - self.mean) * torch.rsqrt(self.var + NORM_EPS)
        return scaled.clamp(-NORM_CLIP, NORM_CLIP)

    @torch.no_grad()
    def update(self, obs: torch.Tensor, group: GradientGroup | None = None) -> None:
        """Merge a batch of observations [..., obs_dim] into the running statistics, in place; in a
        group of learners (`group`), the batch is every learner's part of it (an empty one adds
        nothing), so every learner's statistics move alike."""
        flat = obs.reshape(-1, obs.shape[-1]).to(self.mean.dtype)
        if group is None:
            batch_count = float(flat.shape[0])
            batch_mean = flat.mean(dim=0)
            batch_var = flat.var(dim=0, unbiased=False)
        else:
            batch_count, batch_mean, batch_var = group.moments(flat)
        total = self.count + batch_count
        delta = batch_mean - self.mean
        self.var.copy_((self.var * self.count + batch_var * batch_count
                        + delta.square() * (self.count * batch_count / total)) / total)
        self.mean.add_(delta * (batch_count / total))
        self.count.copy_(total)
