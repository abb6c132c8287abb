"""Batch renormalization (Ioffe 2017), the normalization of CrossQ's critics (Bhatt et al. 2024,
`network.critic_norm: batch_renorm`).

In training it normalizes by the batch's mean and std, corrected by r = std_batch / std_running and
d = (mean_batch - mean_running) / std_running (both clipped, no gradient), so that what a layer
learns from batches agrees with what it computes from the running statistics in evaluation mode,
where the actor's loss reads the critics. For its first `warmup_steps` training forwards it is plain
batch normalization (r = 1, d = 0), while the running statistics settle. Every choice is made on the
device (no value is read back), so the update stays capturable as a CUDA graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MOMENTUM = 0.01  # the running statistics' step towards each batch's
EPS = 1e-3
WARMUP_STEPS = 100_000  # training forwards of plain batch normalization first, as CrossQ
R_MAX, D_MAX = 3.0, 5.0


class BatchRenorm(nn.Module):
    """[B, width] -> [B, width], normalized per feature, then scaled and shifted (learned)."""

    def __init__(self, width: int, warmup_steps: int = WARMUP_STEPS):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))
        self.register_buffer("running_mean", torch.zeros(width))
        self.register_buffer("running_var", torch.ones(width))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.warmup_steps = warmup_steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        running_std = (self.running_var + EPS).sqrt()
        if not self.training:
            return (x - self.running_mean) / running_std * self.weight + self.bias
        with torch.no_grad():
            mean = x.mean(0)
            var = (x - mean).square().mean(0)  # (torch.var_mean over dim 0 is 20x slower on CPUs)
            warm = (self.steps < self.warmup_steps).to(x.dtype)  # 1 during the warm-up, a tensor: no host read
            r = ((var + EPS).sqrt() / running_std).clamp(1.0 / R_MAX, R_MAX)
            d = ((mean - self.running_mean) / running_std).clamp(-D_MAX, D_MAX)
            r = warm + (1.0 - warm) * r
            d = (1.0 - warm) * d
            self.steps += 1
        # (x - mean) / std * r + d, then scaled and shifted, is batch normalization with weight r * w and
        # bias d * w + b: one fused op, which also moves the running statistics (after r and d read them)
        return F.batch_norm(x, self.running_mean, self.running_var, r * self.weight, d * self.weight + self.bias,
                            training=True, momentum=MOMENTUM, eps=EPS)
