"""SAC's losses (Haarnoja et al. 2018, with the automatic temperature of the second paper) on n-step
transitions (s, a, G, gamma_m, s'), actions in [-1, 1] from a tanh-squashed Gaussian.

    a', log p(a'|s') ~ actor(s')
    target = G + gamma_m * (min(Q1_target(s', a'), Q2_target(s', a')) - alpha * log p(a'|s'))
             (CrossQ: the critics themselves in place of their targets, in the same batch as (s, a))
    critic = mean_i w_i [(Q1(s_i, a_i) - target_i)^2 + (Q2(s_i, a_i) - target_i)^2]
    actor  = mean_i (alpha * log p(a~_i|s_i) - min(Q1, Q2)(s_i, a~_i)),  a~_i ~ actor(s_i)
    alpha  = -mean_i log_alpha * (log p(a~_i|s_i) + target_entropy)        (log p detached)

The entropy bonus of the steps inside an n-step window is not in G (the collector folds rewards
only), as in n-step SAC implementations. The Gaussian noise is an argument, so a test can hand the
loss known values.
"""

from __future__ import annotations

import torch
from torch import nn

from raypex.learner.td3_loss import CriticLossOutput, twin_critic_loss


def sac_critic_loss(critic: nn.Module, critic_target: nn.Module | None, actor: nn.Module, alpha: torch.Tensor,
                    obs: torch.Tensor, action: torch.Tensor, returns: torch.Tensor, discount: torch.Tensor,
                    next_obs: torch.Tensor, weight: torch.Tensor | None, noise: torch.Tensor,
                    next_q_bounds: torch.Tensor | None = None) -> CriticLossOutput:
    """The twin critics' loss against the soft clipped double-Q target; `critic_target` None:
    CrossQ's (td3_loss.py twin_critic_loss)."""
    with torch.no_grad():
        next_action, next_log_prob = actor.sample(next_obs, noise)
        entropy_bonus = -alpha * next_log_prob.float()
    return twin_critic_loss(critic, critic_target, obs, action, returns, discount, next_obs, next_action,
                            entropy_bonus, weight, next_q_bounds)


def sac_actor_and_temperature_loss(actor: nn.Module, critic: nn.Module, log_alpha: torch.Tensor, obs: torch.Tensor,
                                   noise: torch.Tensor, target_entropy: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(the actor's loss, the temperature's loss) from one reparameterized sample per observation."""
    action, log_prob = actor.sample(obs, noise)
    q1, q2 = critic(obs, action)
    alpha = log_alpha.exp().detach()
    actor_loss = (alpha * log_prob.float() - torch.minimum(q1, q2).float()).mean()
    temperature_loss = -(log_alpha * (log_prob.detach().float() + target_entropy)).mean()
    return actor_loss, temperature_loss
