"""One whole update as one function of device tensors: G micro-batches of forward and backward,
the loss scale, clipping, the optimizer step and the Polyak target update.

The same `UpdateStep.__call__` runs eagerly (the CPU path, and CUDA with capture off) and is
captured once as a CUDA graph (learner/cuda_graph.py), so a test can hold one against the other.
What makes it capturable:
- nothing is read back to the host: no `.item()`, no branch on a tensor's value; an fp16 overflow
  skips the step on the device (learner/loss_scale.py), and the running loss and Q sums are
  device tensors added to in place and read once per epoch;
- gradients start each update as None, so the first micro-batch's backward writes them and the
  others add to them: in a graph that is the same kernels over the same buffers on every replay
  (the eager caller sets them back to None after each update);
- the optimizer is fused Adam with its step counter on the device.
A hard target copy is the one part left to the caller: it happens every few thousand updates,
and a host-side `_foreach_copy_` then costs nothing.

Each micro-batch is `batch[field][g]`: every field has the leading shape [G, ...]. When the
replay's columns are on the update's device, the batch holds only the drawn indices and `gather`
builds the fields from the columns first (learner/replay_feed.py): inside the captured graph, so
a pixel batch's stacks are gathered from the frames where they are stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from learner.losses import double_dqn_loss
from learner.precision import PrecisionPolicy


@dataclass(frozen=True)
class StepSettings:
    """The loss and optimisation constants an update needs."""

    huber_delta: float
    double_dqn: bool
    max_grad_norm: float
    polyak_tau: float | None  # None: the target is copied by the caller (hard updates)
    share_online_pass: bool  # one online pass over s and s' (see double_dqn_loss)
    prioritized: bool = False  # weigh each transition by batch["weight"] and keep its |TD error|


class UpdateStep:
    """Applies one update to `online` (and, for Polyak averaging, `target`) from a [G, B] batch."""

    def __init__(self, online: nn.Module, target: nn.Module, online_fn: nn.Module, target_fn: nn.Module,
                 optimizer: torch.optim.Optimizer, precision: PrecisionPolicy, settings: StepSettings,
                 device: torch.device,
                 gather: Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]] | None = None):
        """`gather` turns a batch of indices into the training fields (None: the batch has them)."""
        self.gather = gather
        self.online_fn = online_fn  # the networks as called (compiled or not)
        self.target_fn = target_fn
        self.params = list(online.parameters())
        self.target_params = list(target.parameters())
        self.optimizer = optimizer
        self.precision = precision
        self.s = settings
        # Sums over micro-batches since the last `take_sums`: read once per epoch, not per update.
        self.loss_sum = torch.zeros((), device=device)
        self.q_sum = torch.zeros((), device=device)
        # Prioritized replay: the last update's |TD error| per transition, [G, B], written in place
        # (one buffer, so a captured graph writes the same memory on every replay).
        self.td_abs: torch.Tensor | None = None
        if precision.scaler is not None:
            optimizer.found_inf = precision.scaler.found_inf  # fused Adam skips the step when it is 1

    def __call__(self, batch: Mapping[str, torch.Tensor]) -> None:
        """One update: accumulate G micro-batches, unscale, clip, step, move the target."""
        if self.gather is not None:
            batch = self.gather(batch)
        micro_batches = batch["action"].shape[0]
        scaler = self.precision.scaler
        if self.s.prioritized and self.td_abs is None:
            self.td_abs = torch.zeros(batch["action"].shape, device=batch["action"].device)
        for g in range(micro_batches):
            obs, next_obs = batch["obs"][g], batch["next_obs"][g]
            with self.precision.autocast():
                out = double_dqn_loss(
                    self.online_fn, self.target_fn, obs, batch["action"][g], batch["return"][g],
                    # Uniform replay: no importance weights, so the loss skips the multiply.
                    batch["discount"][g], next_obs, batch["weight"][g] if self.s.prioritized else None,
                    self.s.huber_delta, self.s.double_dqn, self.s.share_online_pass,
                )
            if self.td_abs is not None:
                self.td_abs[g].copy_(out.td_error.detach().abs())
            loss = out.loss / micro_batches  # the gradient of one batch G times larger
            (scaler.scale_loss(loss) if scaler is not None else loss).backward()
            self.loss_sum += out.loss.detach()
            self.q_sum += out.q_mean
        if scaler is not None:
            scaler.unscale_([p.grad for p in self.params])
        nn.utils.clip_grad_norm_(self.params, self.s.max_grad_norm, foreach=True)
        self.optimizer.step()
        if scaler is not None:
            scaler.update()
        if self.s.polyak_tau is not None:
            with torch.no_grad():
                # One fused call over all parameters; a Python loop costs ~5x more per update.
                torch._foreach_lerp_(self.target_params, self.params, self.s.polyak_tau)

    def training_tensors(self) -> list[torch.Tensor]:
        """Every tensor an update changes, optimizer state aside (what a warm-up snapshot puts back)."""
        scaler = self.precision.scaler
        scaler_tensors = [scaler.scale, scaler.growth_tracker, scaler.found_inf] if scaler is not None else []
        return [*self.params, *self.target_params, *scaler_tensors, self.loss_sum, self.q_sum]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers an update steps."""
        return [self.optimizer]

    def take_sums(self) -> tuple[float, float]:
        """(loss sum, Q-mean sum) over the micro-batches since the last call; resets both."""
        sums = (float(self.loss_sum), float(self.q_sum))
        self.loss_sum.zero_()
        self.q_sum.zero_()
        return sums


def copy_target(target_params: list[torch.Tensor], online_params: list[torch.Tensor]) -> None:
    """The hard target update: target <- online, in place (captured graphs keep their tensors)."""
    with torch.no_grad():
        torch._foreach_copy_(target_params, online_params)
