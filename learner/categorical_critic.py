"""The categorical critic's support (`network.critic_head: categorical`): a critic that predicts a
distribution over fixed values instead of Q itself, trained by cross-entropy (Imani & White 2018;
Farebrother et al. 2024, "Stop Regressing"), as the critics that lead per sample at high update
ratios do (SimbaV2's distributional critic, BRC, XQC).

The support is `bins` values, the centres of `bins` equal intervals over [low, high]. A critic
head gives `bins` logits; its Q is the mean of their softmax over the centres. A scalar target y
becomes its HL-Gauss distribution: the mass each interval holds of a Gaussian N(y, sigma^2), sigma
0.75 intervals wide (the paper's ratio), renormalised to the support; y outside [low, high] counts
as the nearest end. The loss is the cross-entropy of the head's softmax against it: regression
whose gradient is bounded whatever the scale of the target, where a squared error's grows with it.

    p_i(y)  = (Phi((e_{i+1} - y) / sigma) - Phi((e_i - y) / sigma)) / (Phi((e_n - y) / sigma) - Phi((e_0 - y) / sigma))
    loss    = - sum_i p_i(y) log softmax(logits)_i
    Q       = sum_i softmax(logits)_i c_i
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

SIGMA_BINS = 0.75  # the Gaussian's standard deviation, in intervals of the support


class HLGaussSupport(nn.Module):
    """`bins` values over [low, high] and the conversions between scalars and distributions over them."""

    def __init__(self, low: float, high: float, bins: int):
        super().__init__()
        if not low < high or bins < 2:
            raise ValueError(f"a support needs low < high and at least 2 bins, got [{low}, {high}] and {bins}")
        self.low, self.high, self.bins = float(low), float(high), bins
        edges = torch.linspace(self.low, self.high, bins + 1)
        self.register_buffer("edges", edges)
        self.register_buffer("centers", (edges[:-1] + edges[1:]) / 2)
        self.sigma = SIGMA_BINS * (self.high - self.low) / bins

    def expected(self, logits: torch.Tensor) -> torch.Tensor:
        """Q [...] of logits [..., bins]: the mean of their softmax over the centres, in float32."""
        return (F.softmax(logits.float(), dim=-1) * self.centers).sum(dim=-1)

    def target_distribution(self, target: torch.Tensor) -> torch.Tensor:
        """The HL-Gauss distribution [B, bins] of scalar targets [B] (see the module docstring)."""
        y = target.float().clamp(self.low, self.high).unsqueeze(-1)
        cdf = torch.special.erf((self.edges - y) / (math.sqrt(2.0) * self.sigma))  # 2 Phi - 1 at every edge
        mass = cdf[..., 1:] - cdf[..., :-1]
        return mass / (cdf[..., -1:] - cdf[..., :1])

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Cross-entropy [B] of logits [B, bins] against the HL-Gauss distributions of targets [B]."""
        return -(self.target_distribution(target) * F.log_softmax(logits.float(), dim=-1)).sum(dim=-1)


def head_outputs(support: HLGaussSupport | None) -> int:
    """What a critic head gives: one Q-value, or a logit for each value of `support`."""
    return 1 if support is None else support.bins


def head_q(support: HLGaussSupport | None, out: torch.Tensor) -> torch.Tensor:
    """Q [B] of a head's output [B, head_outputs(support)]."""
    return out.squeeze(1) if support is None else support.expected(out)
