"""R2D2's learning on replayed sequences (Kapturowski et al., ICLR 2019) as functions of tensors,
with no network or replay of their own: the pieces the r2d2 update puts together.

A batch holds B sequences of T steps, time first: [T, B, ...]. Each sequence comes with the
recurrent state its collector had at its first step. The first `burn_in` steps only bring that
state up to date (unrolled without gradient, `unroll`); the loss is on the L = T - burn_in steps
after them. A sequence may run across an episode's end: `first` marks each episode's first step,
where the recurrent state starts again from the initial one, and the step before it has discount
0, so no return or bootstrap crosses from one episode into the next. (An episode cut by a time
limit is ended the same way, as R2D2's Atari agents do.) The step just before an episode's first is
an autoreset's pad step (actors/sequence_adder.py): no env step, its observation the last one's,
its action never taken; it carries no loss and sets no priority (`loss_mask`).

Targets are n-step double-Q: for step t of the window,
    G_t = sum_{k<m} (prod_{j<k} d_{t+j}) r_{t+k} + (prod_{j<m} d_{t+j}) V(s_{t+m}),
    V(s) = Q_target(s, argmax_a Q_online(s, a)),  m = min(n, L - 1 - t),
with d_t the step's discount (gamma, 0 where the episode ends). The window's last step has no
state after it to bootstrap from, so it serves as a bootstrap only: L - 1 steps carry a loss. With
value rescaling, V goes through h^-1 and the return through h (`value_rescale`). A sequence's
priority mixes the max and the mean of its |TD errors| (eta * max + (1 - eta) * mean).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from raypex.replay.contracts import indexed

RESCALE_EPS = 1e-3  # R2D2's epsilon in h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x
PRIORITY_ETA = 0.9  # R2D2's mix of a sequence's max and mean |TD error|

Core = Callable[[torch.Tensor, tuple[torch.Tensor, ...]], tuple[torch.Tensor, tuple[torch.Tensor, ...]]]


def value_rescale(x: torch.Tensor, eps: float = RESCALE_EPS) -> torch.Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x: squashes large returns (Pohlen et al., 2018)."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def inverse_value_rescale(x: torch.Tensor, eps: float = RESCALE_EPS) -> torch.Tensor:
    """h^-1(x), so that inverse_value_rescale(value_rescale(x)) == x."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root.square() - 1.0)


def unroll(core: Core, obs: torch.Tensor, first: torch.Tensor, state: tuple[torch.Tensor, ...],
           initial: tuple[torch.Tensor, ...], burn_in: int) -> torch.Tensor:
    """Q-values [T - burn_in, B, A] of `core` (one step: (obs [B, ...], state) -> (q [B, A], state))
    run over `obs` [T, B, ...] (or parts of that shape) from `state` (each tensor [B, ...], the state stored with each
    sequence). Where `first` [T, B] is set the state is `initial`'s (an episode starts). The first
    `burn_in` steps run without gradient and their state is detached: no gradient reaches them."""
    q_values = []
    for t in range(first.shape[0]):
        starts = first[t].view(-1, *([1] * (state[0].dim() - 1)))
        state = tuple(torch.where(starts, init.expand_as(s), s) for s, init in zip(state, initial, strict=True))
        if t < burn_in:
            with torch.no_grad():
                _, state = core(indexed(obs, t), state)
            state = tuple(s.detach() for s in state)
            continue
        q, state = core(indexed(obs, t), state)
        q_values.append(q)
    return torch.stack(q_values)


def double_q_values(q_online: torch.Tensor, q_target: torch.Tensor) -> torch.Tensor:
    """V(s_t) = Q_target(s_t, argmax_a Q_online(s_t, a)) for every step: [L, B] from [L, B, A]."""
    best = q_online.detach().argmax(dim=-1, keepdim=True)
    return q_target.gather(-1, best).squeeze(-1)


def n_step_targets(rewards: torch.Tensor, discounts: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    """G_t for t < L - 1 (see the module docstring) from rewards, discounts and values, each [L, B]."""
    steps = rewards.shape[0] - 1
    targets = torch.zeros_like(rewards[:steps])
    for t in range(steps):
        m = min(n, steps - t)
        scale = torch.ones_like(rewards[t])
        total = torch.zeros_like(rewards[t])
        for k in range(m):
            total = total + scale * rewards[t + k]
            scale = scale * discounts[t + k]
        targets[t] = total + scale * values[t + m]
    return targets


def td_errors(q_online: torch.Tensor, q_target: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
              discounts: torch.Tensor, n: int, rescale: bool) -> torch.Tensor:
    """target - Q_online(s_t, a_t) for the window's first L - 1 steps, [L - 1, B]: q_online and
    q_target [L, B, A], actions, rewards and discounts [L, B]. The target carries no gradient."""
    with torch.no_grad():
        values = double_q_values(q_online, q_target)
        if rescale:
            values = inverse_value_rescale(values)
        targets = n_step_targets(rewards, discounts, values, n)
        if rescale:
            targets = value_rescale(targets)
    taken = q_online[:-1].gather(-1, actions[:-1].long().unsqueeze(-1)).squeeze(-1)
    return targets - taken


def loss_mask(first: torch.Tensor, burn_in: int) -> torch.Tensor:
    """Which of the window's L - 1 TD errors count, [L - 1, B] bool, from `first` [T, B]: all but
    the pad steps, the steps followed by an episode's first (see the module docstring)."""
    return ~first[burn_in + 1:].bool()


def sequence_priorities(td_abs: torch.Tensor, mask: torch.Tensor, eta: float = PRIORITY_ETA) -> torch.Tensor:
    """eta * max + (1 - eta) * mean of each sequence's |TD errors| [steps, B] over the steps `mask`
    keeps ([steps, B], 1 or 0): [B]; 0 for a sequence with no step kept."""
    kept = mask.to(td_abs.dtype)
    count = kept.sum(dim=0)
    mean = (td_abs * kept).sum(dim=0) / count.clamp(min=1.0)
    largest = torch.where(kept > 0, td_abs, torch.zeros_like(td_abs)).max(dim=0).values
    return eta * largest + (1.0 - eta) * mean
