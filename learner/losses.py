"""The n-step Double DQN loss with a Huber penalty.

For a transition (s, a, G, gamma_m, s') folded by the collector over m <= n steps:
    target = G + gamma_m * Q_target(s', argmax_a' Q_online(s', a'))     (Double DQN)
    target = G + gamma_m * max_a' Q_target(s', a')                      (plain DQN)
    loss   = mean_i  w_i * huber(Q_online(s_i, a_i) - target_i)
gamma_m is 0 when the episode terminated inside the window, so terminal transitions do not
bootstrap; truncated ones do (the collector set gamma_m = gamma^m for them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LossOutput:
    """The scalar loss to backpropagate plus what the learner reports."""

    loss: torch.Tensor
    q_taken: torch.Tensor  # [B] Q(s, a), detached
    td_target: torch.Tensor  # [B]
    q_mean: torch.Tensor  # scalar, detached
    per_sample: torch.Tensor | None = None  # [B] each transition's own loss, where it is its priority (QR-DQN's)

    @property
    def td_error(self) -> torch.Tensor:
        """Q(s, a) - target per transition (for priorities); computed only when asked for."""
        return self.q_taken - self.td_target

    @property
    def priority(self) -> torch.Tensor:
        """What prioritized replay weighs each transition by: its own loss where the loss gives one,
        else abs(TD error)."""
        return self.per_sample if self.per_sample is not None else self.td_error.detach().abs()


def double_dqn_loss(
    online: nn.Module,
    target: nn.Module,
    obs: torch.Tensor,
    action: torch.Tensor,
    returns: torch.Tensor,
    discount: torch.Tensor,
    next_obs: torch.Tensor,
    weight: torch.Tensor | None,
    huber_delta: float,
    double_dqn: bool = True,
    share_online_pass: bool = True,
) -> LossOutput:
    """Huber loss between Q(s, a) and the n-step (Double) DQN target, weighted when `weight` is
    given (importance weights); `weight=None` means uniform replay and skips the multiply.

    `share_online_pass` runs the online network over s and s' in one pass: half the per-op
    overhead of two passes, which is what bounds a small MLP, but backward then runs over both
    halves, which doubles its arithmetic: a CNN (or any update captured as a CUDA graph, where
    launches are free) wants two passes, the s' one without autograd.
    """
    q_next_online = None
    if double_dqn and share_online_pass:
        # Gradients only flow through the s half (the s' half is used under no_grad below).
        q_both = online(torch.cat([obs, next_obs]))
        q_all, q_next_online = q_both[: len(obs)], q_both[len(obs) :]
    else:
        q_all = online(obs)
    q_taken = q_all.gather(1, action.long().unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        if double_dqn and q_next_online is None:
            q_next_online = online(next_obs)
        next_target = target(next_obs)
        if q_next_online is not None:
            next_value = next_target.gather(1, q_next_online.argmax(dim=1, keepdim=True)).squeeze(1)
        else:
            next_value = next_target.max(dim=1).values
        td_target = torch.addcmul(returns, discount, next_value.to(returns.dtype))
    q_taken = q_taken.to(td_target.dtype)  # fp32 loss under bf16/fp16 autocast
    if weight is None:
        loss = F.huber_loss(q_taken, td_target, delta=huber_delta)
    else:
        per_item = F.huber_loss(q_taken, td_target, reduction="none", delta=huber_delta)
        loss = (weight.to(per_item.dtype) * per_item).mean()
    q_detached = q_taken.detach()
    return LossOutput(loss, q_detached, td_target, q_detached.mean())
