"""TD3's losses (Fujimoto et al. 2018) on n-step transitions (s, a, G, gamma_m, s'), actions in [-1, 1].

    a'     = clip(actor_target(s') + clip(noise, -c, c), -1, 1)        target policy smoothing
    target = G + gamma_m * min(Q1_target(s', a'), Q2_target(s', a'))    clipped double Q
    critic = mean_i w_i [(Q1(s_i, a_i) - target_i)^2 + (Q2(s_i, a_i) - target_i)^2]
    actor  = -mean_i Q1(s_i, actor(s_i))                                (every policy_delay updates)

gamma_m is 0 where the episode terminated inside the window. The smoothing noise is an argument
(the update draws it) so a test can hand the loss known values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class CriticLossOutput:
    """The critics' loss and what the learner reports and prioritized replay needs."""

    loss: torch.Tensor
    td_error: torch.Tensor  # [B] Q1(s, a) - target, detached
    q_mean: torch.Tensor  # scalar, detached


def weighted_mean(per_item: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Mean over the batch, weighted by importance weights when given (prioritized replay)."""
    return per_item.mean() if weight is None else (weight.to(per_item.dtype) * per_item).mean()


def critic_loss_to(critic: nn.Module, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor,
                   weight: torch.Tensor | None) -> CriticLossOutput:
    """Both critics' squared error to one target (shared by TD3 and SAC)."""
    q1, q2 = critic(obs, action)
    q1, q2 = q1.float(), q2.float()
    loss = weighted_mean((q1 - target).pow(2) + (q2 - target).pow(2), weight)
    return CriticLossOutput(loss, (q1 - target).detach(), q1.detach().mean())


def td3_critic_loss(critic: nn.Module, critic_target: nn.Module, actor_target: nn.Module, obs: torch.Tensor,
                    action: torch.Tensor, returns: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor,
                    weight: torch.Tensor | None, noise: torch.Tensor, noise_clip: float) -> CriticLossOutput:
    """The twin critics' loss against the smoothed, clipped double-Q target; `noise` is the
    smoothing noise already scaled by policy_noise (clipped here to +-noise_clip)."""
    with torch.no_grad():
        next_action = (actor_target(next_obs).float() + noise.clamp(-noise_clip, noise_clip)).clamp(-1.0, 1.0)
        q1_next, q2_next = critic_target(next_obs, next_action)
        target = returns + discount * torch.minimum(q1_next, q2_next).float()
    return critic_loss_to(critic, obs, action, target, weight)


def td3_actor_loss(actor: nn.Module, critic: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """-Q1(s, actor(s)), averaged: the deterministic policy gradient through the first critic."""
    q1, _ = critic(obs, actor(obs))
    return -q1.float().mean()
