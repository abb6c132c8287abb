"""Batch renormalization (Ioffe 2017), the normalization of CrossQ's critics (Bhatt et al. 2024,
`network.critic_norm: batch_renorm`).

In training it normalizes by the batch's mean and std, corrected by r = std_batch / std_running and
d = (mean_batch - mean_running) / std_running (both clipped, no gradient), so that what a layer
learns from batches agrees with what it computes from the running statistics in evaluation mode,
where the actor's loss reads the critics. For its first `warmup_steps` training forwards it is plain
batch normalization (r = 1, d = 0), while the running statistics settle. Every choice is made on the
device (no value is read back), so the update stays capturable as a CUDA graph.

In a group of learners (`group`, learner/gradient_group.py) the batch is every learner's part of
it: the mean and variance are the group's, from sums over the group that carry the gradient back
to every part (as torch's SyncBatchNorm does), so each learner normalizes and moves its running
statistics exactly as one learner given the whole batch would; an empty part adds nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from raypex.learner.gradient_group import GradientGroup

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
        self.group: GradientGroup | None = None  # a learner of a group: the batch is the group's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        running_std = (self.running_var + EPS).sqrt()
        if not self.training:
            return (x - self.running_mean) / running_std * self.weight + self.bias
        if self.group is not None:
            return self._group_forward(x, running_std)
        with torch.no_grad():
            mean = x.mean(0)
            var = (x - mean).square().mean(0)  # (torch.var_mean over dim 0 is 20x slower on CPUs)
            r, d = self._corrections(mean, var, running_std, x.dtype)
        # (x - mean) / std * r + d, then scaled and shifted, is batch normalization with weight r * w and
        # bias d * w + b: one fused op, which also moves the running statistics (after r and d read them)
        return F.batch_norm(x, self.running_mean, self.running_var, r * self.weight, d * self.weight + self.bias,
                            training=True, momentum=MOMENTUM, eps=EPS)

    def _corrections(self, mean: torch.Tensor, var: torch.Tensor, running_std: torch.Tensor, dtype: torch.dtype):
        """(r, d) for the batch's `mean` and `var`, 1 and 0 during the warm-up; counts the forward."""
        warm = (self.steps < self.warmup_steps).to(dtype)  # 1 during the warm-up, a tensor: no host read
        r = ((var + EPS).sqrt() / running_std).clamp(1.0 / R_MAX, R_MAX)
        d = ((mean - self.running_mean) / running_std).clamp(-D_MAX, D_MAX)
        self.steps += 1
        return warm + (1.0 - warm) * r, (1.0 - warm) * d

    def _group_forward(self, x: torch.Tensor, running_std: torch.Tensor) -> torch.Tensor:
        """The training forward over the group's batch, of which `x` is this learner's rows."""
        wide = x.to(self.running_mean.dtype)  # fp32 sums of a bf16 autocast forward
        count, mean, var = self.group.moments(wide)
        with torch.no_grad():
            r, d = self._corrections(mean, var, running_std, wide.dtype)
            # torch's batch_norm: the running variance moves towards the unbiased one
            self.running_mean.lerp_(mean, MOMENTUM)
            self.running_var.lerp_(var * count / (count - 1.0).clamp(min=1.0), MOMENTUM)
        normalized = (wide - mean) * torch.rsqrt(var + EPS)
        return (normalized * (r * self.weight) + (d * self.weight + self.bias)).to(x.dtype)
