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

from raypex.replay.contracts import each_part


@dataclass
class CriticLossOutput:
    """The critics' loss and what the learner reports and prioritized replay needs."""

    loss: torch.Tensor
    td_error: torch.Tensor  # [B] Q1(s, a) - target, detached
    q_mean: torch.Tensor  # scalar, detached
    target: torch.Tensor  # [B] the regression target, detached


def weighted_mean(per_item: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Mean over the batch, weighted by importance weights when given (prioritized replay)."""
    return per_item.mean() if weight is None else (weight.to(per_item.dtype) * per_item).mean()


def twin_critic_loss(critic: nn.Module, critic_target: nn.Module | None, obs: torch.Tensor, action: torch.Tensor,
                     returns: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor, next_action: torch.Tensor,
                     next_bonus: torch.Tensor | float, weight: torch.Tensor | None,
                     next_q_bounds: torch.Tensor | None = None) -> CriticLossOutput:
    """Both critics' squared error to G + gamma_m * (min(Q1, Q2)(s', a') + next_bonus), shared by TD3
    and SAC. The next Q-values come from `critic_target`, or with None (CrossQ: no target critics)
    from the critics themselves, (s, a) and (s', a') going through them as one batch so that their
    batch renormalization sees both; either way no gradient flows through the target. With
    `next_q_bounds` ([min, max], SALE's value clipping) the next Q-value is clamped into them. A
    categorical critic (its `support` set, learner/categorical_critic.py) is trained by the
    cross-entropy of its logits to the target's HL-Gauss distribution instead of the squared error."""
    support = critic.support
    heads = critic if support is None else critic.logits  # Q [B], or logits [B, bins]
    value = (lambda out: out) if support is None else support.expected
    if critic_target is None:
        both = each_part(lambda now, then: torch.cat([now, then]), obs, next_obs)
        out1_both, out2_both = heads(both, torch.cat([action, next_action.to(action.dtype)]))
        out1, out1_next = out1_both.float().chunk(2)
        out2, out2_next = out2_both.float().chunk(2)
        next_q = torch.minimum(value(out1_next), value(out2_next)).detach()
    else:
        with torch.no_grad():
            q1_next, q2_next = critic_target(next_obs, next_action)
            next_q = torch.minimum(q1_next, q2_next).float()
        out1, out2 = (out.float() for out in heads(obs, action))
    if next_q_bounds is not None:
        next_q = next_q.clamp(next_q_bounds[0], next_q_bounds[1])
    target = returns + discount * (next_q + next_bonus)
    q1 = value(out1)
    if support is None:
        per_item = (out1 - target).pow(2) + (out2 - target).pow(2)
    else:
        per_item = support.loss(out1, target) + support.loss(out2, target)
    loss = weighted_mean(per_item, weight)
    return CriticLossOutput(loss, (q1 - target).detach(), q1.detach().mean(), target.detach())


def td3_critic_loss(critic: nn.Module, critic_target: nn.Module | None, actor_target: nn.Module, obs: torch.Tensor,
                    action: torch.Tensor, returns: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor,
                    weight: torch.Tensor | None, noise: torch.Tensor, noise_clip: float,
                    next_q_bounds: torch.Tensor | None = None) -> CriticLossOutput:
    """The twin critics' loss against the smoothed, clipped double-Q target; `noise` is the
    smoothing noise already scaled by policy_noise (clipped here to +-noise_clip);
    `critic_target` None: CrossQ's (twin_critic_loss)."""
    with torch.no_grad():
        next_action = (actor_target(next_obs).float() + noise.clamp(-noise_clip, noise_clip)).clamp(-1.0, 1.0)
    return twin_critic_loss(critic, critic_target, obs, action, returns, discount, next_obs, next_action, 0.0, weight,
                            next_q_bounds)


def td3_actor_loss(actor: nn.Module, critic: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """-Q1(s, actor(s)), averaged: the deterministic policy gradient through the first critic."""
    q1, _ = critic(obs, actor(obs))
    return -q1.float().mean()
