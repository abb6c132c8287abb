"""QR-DQN's and IQN's losses: the quantile Huber loss between the online network's quantiles of
Z(s, a) and the n-step target's, θ'_j = G + gamma_m θ_target,j(s', a*), a* the greedy action by the
mean (the online network's with Double DQN, else the target's).

For the online quantiles' fractions τ_i (QR-DQN's fixed midpoints (2i + 1) / 2N; IQN's drawn at
random) and every pair (i, j), u_ij = θ'_j - θ_i and

    loss_ij = |τ_i - 1{u_ij < 0}| * huber_κ(u_ij) / κ,

summed over i and averaged over j, per transition: that per-transition loss is also its priority
under prioritized replay; the batch's loss is its mean (importance-weighted when given).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from raypex.learner.losses import LossOutput
from raypex.replay.contracts import batch_size


def quantile_fractions(n: int, device=None) -> torch.Tensor:
    """τ_i = (2i + 1) / 2N, the midpoints of N equal slices of [0, 1]."""
    return (torch.arange(n, device=device, dtype=torch.float32) * 2 + 1) / (2 * n)


def quantile_huber(predicted: torch.Tensor, target: torch.Tensor, kappa: float,
                   fractions: torch.Tensor | None = None) -> torch.Tensor:
    """Per transition [B]: sum_i mean_j |τ_i - 1{u_ij < 0}| huber_κ(u_ij) / κ, with u_ij = target_j -
    predicted_i (`predicted` [B, N], `target` [B, N']); `fractions` [B, N]: the τ_i `predicted` are
    the quantiles of (IQN's, drawn), else QR-DQN's fixed midpoints."""
    u = target.unsqueeze(1) - predicted.unsqueeze(2)  # [B, N (i), N (j)]
    huber = F.huber_loss(predicted.unsqueeze(2).expand_as(u), target.unsqueeze(1).expand_as(u), reduction="none",
                         delta=kappa)
    tau = (quantile_fractions(predicted.shape[1], predicted.device).view(1, -1, 1) if fractions is None
           else fractions.unsqueeze(2).to(u.dtype))
    weight = (tau - (u.detach() < 0).to(u.dtype)).abs()
    return (weight * huber / kappa).sum(dim=1).mean(dim=1)


def quantile_dqn_loss(online, target, obs, action, returns, discount, next_obs, weight: torch.Tensor | None,
                      kappa: float, double_dqn: bool = True) -> LossOutput:
    """The batch's quantile Huber loss (LossOutput: `per_sample` gives each transition's, its priority)."""
    taken = _of_actions(online.quantiles(obs), action)
    with torch.no_grad():
        next_target = target.quantiles(next_obs)
        chooser = online.quantiles(next_obs) if double_dqn else next_target
        next_quantiles = _of_actions(next_target, chooser.mean(dim=2).argmax(dim=1))
    return _scored(taken, next_quantiles, returns, discount, weight, kappa)


def implicit_quantile_loss(online, target, obs, action, returns, discount, next_obs, weight: torch.Tensor | None,
                           kappa: float, samples: int, double_dqn: bool = True) -> LossOutput:
    """IQN's loss: the quantile Huber loss at `samples` fractions drawn for each transition's online
    quantiles, against its target's at as many drawn independently; the greedy next action by the
    networks' Q-values (their fixed fractions' mean)."""
    batch = batch_size(obs)
    fractions = torch.rand(batch, samples, device=returns.device)
    taken = _of_actions(online.quantiles(obs, fractions), action)
    with torch.no_grad():
        best = (online(next_obs) if double_dqn else target(next_obs)).argmax(dim=1)
        next_quantiles = _of_actions(target.quantiles(next_obs, torch.rand(batch, samples, device=returns.device)), best)
    return _scored(taken, next_quantiles, returns, discount, weight, kappa, fractions)


def _of_actions(quantiles: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Each transition's quantiles [B, N] of its action, from all actions' [B, A, N]."""
    return quantiles.gather(1, actions.long().view(-1, 1, 1).expand(-1, 1, quantiles.shape[2])).squeeze(1)


def _scored(taken: torch.Tensor, next_quantiles: torch.Tensor, returns: torch.Tensor, discount: torch.Tensor,
            weight: torch.Tensor | None, kappa: float, fractions: torch.Tensor | None = None) -> LossOutput:
    """The quantile Huber loss of the taken actions' quantiles against the n-step target's."""
    td_target = returns.unsqueeze(1) + discount.unsqueeze(1) * next_quantiles.detach().to(returns.dtype)
    taken = taken.to(td_target.dtype)  # fp32 loss under bf16/fp16 autocast
    per_sample = quantile_huber(taken, td_target, kappa, fractions)
    loss = per_sample.mean() if weight is None else (weight.to(per_sample.dtype) * per_sample).mean()
    q_taken = taken.detach().mean(dim=1)
    return LossOutput(loss, q_taken, td_target.mean(dim=1), q_taken.mean(), per_sample.detach())
