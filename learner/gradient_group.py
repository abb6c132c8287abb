"""Several learners as one: each learner computes on its own part of the group's batch, and every
figure an update takes from the batch is the whole batch's, summed over a torch.distributed
process group, so that each learner steps as one learner given the whole batch would.

Each learner draws its part of the batch from the shards it holds (replay/group_draw.py), a
different number each update, possibly none. The group's batch is the G x B rows of one
learner's [G, B] batch taken in order, and a learner's part is the rows [offset, offset + count)
of it (`BatchPart`). One learner's loss is the batch's mean; it equals the sum over learners of
each part's mean times its share of the batch (count / total). So a step scales its loss by
`share` before backward, and `reduce` sums the gradients over the group (one all-reduce of one flat
tensor per optimizer's parameters): every learner then holds the whole batch's gradient, clips
and steps alike, and the networks stay identical on every learner without being sent. Scaling the
loss rather than the gradient keeps that true where the forward itself reads the group
(`sum_with_gradient`: batch renormalization's statistics), whose backward then sums each
learner's share of the gradient through the statistics.

What else an update decides from its batch is decided for the group too: an fp16 overflow on any
learner skips the step on every one (`reduce`'s `found_inf`, the maximum over the group), and
statistics of the batch (observation normalization's, batch renormalization's, SALE's value
bounds) are summed or bounded over the group (`sum_`, `sum_with_gradient`, `bounds_`), an empty
part adding nothing.

A learner whose part is empty still joins every collective of the update: its gradients count as
zeros.

Noise a step draws per transition (TD3's target smoothing, SAC's sampled actions) comes from a
generator seeded alike on every learner and drawn for the whole batch; each learner keeps the rows
of its own part (`own_rows`), so a transition sees the noise it would see in one learner.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import torch
import torch.distributed as dist


class BatchPart(NamedTuple):
    """Where this learner's transitions sit in the group's batch of one update."""

    offset: int  # the first of them, counting every learner before this one
    count: int  # how many (0: none this update)
    total: int  # the group's batch


class GradientGroup:
    """This learner's view of the group's process group for its update step (see the module docstring)."""

    def __init__(self, process_group: dist.ProcessGroup | None = None):
        """`process_group` None: torch.distributed's default group."""
        self.process_group = process_group
        self.part: BatchPart | None = None  # set before each update
        self.reduce_s = 0.0  # wall seconds spent in `reduce` so far (its share of an update: raypex bench)

    @property
    def share(self) -> float:
        """This learner's share of the group's batch: what its mean loss is weighed by."""
        return self.part.count / self.part.total

    def reduce(self, params: list[torch.Tensor], found_inf: torch.Tensor | None = None) -> None:
        """Every learner's gradients of `params` (of losses already weighed by `share`) summed: the
        gradient of the whole batch's mean loss, the same on every learner. `found_inf` (fp16 loss
        scaling's overflow flag) becomes 1 on every learner when it is 1 on any."""
        start = time.perf_counter()
        grads = [p.grad if p.grad is not None and self.part.count else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.process_group)
        offset = 0
        for p in params:
            p.grad = flat[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        if found_inf is not None:
            dist.all_reduce(found_inf, op=dist.ReduceOp.MAX, group=self.process_group)
        self.reduce_s += time.perf_counter() - start

    def moments(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(count, mean, variance) per column of the group's rows, of which `rows` [n, width] are
        this learner's (n may be 0), differentiably; the variance from the deviations (a second
        sum) rather than E[x^2] - mean^2, as torch's batch norm computes it."""
        sums = self.sum_with_gradient(torch.cat([rows.sum(0), rows.new_full((1,), float(rows.shape[0]))]))
        count = sums[-1]
        mean = sums[:-1] / count
        return count, mean, self.sum_with_gradient((rows - mean).square().sum(0)) / count

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over the group, in place (no gradient); returns it."""
        dist.all_reduce(tensor, group=self.process_group)
        return tensor

    def sum_with_gradient(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over the group, differentiably: its gradient is summed over the group too."""
        return _GroupSum.apply(tensor, self.process_group)

    def bounds_(self, bounds: torch.Tensor) -> torch.Tensor:
        """[low, high] widened to the group's lowest low and highest high, in place; returns it."""
        flipped = torch.stack([-bounds[0], bounds[1]])
        dist.all_reduce(flipped, op=dist.ReduceOp.MAX, group=self.process_group)
        bounds.copy_(torch.stack([-flipped[0], flipped[1]]))
        return bounds

    def own_rows(self, noise: torch.Tensor, dim: int) -> torch.Tensor:
        """The rows of `noise`, drawn for the whole [G, B] batch at dims `dim`, `dim + 1`, that belong
        to this learner's part, as one micro-batch: [..., 1, count, ...]."""
        rows = noise.flatten(dim, dim + 1).narrow(dim, self.part.offset, self.part.count)
        return rows.unsqueeze(dim)


def weighed(loss: torch.Tensor, group: GradientGroup | None) -> torch.Tensor:
    """`loss`, for a learner of `group` weighed by its share of the group's batch (alone: as it is)."""
    return loss if group is None else loss * group.share


class _GroupSum(torch.autograd.Function):
    """A sum over the group whose backward sums the gradients over the group: every learner's
    loss reads the sum, so each learner's input gets the group's gradient of it. (torch's own,
    torch.distributed.nn.functional.all_reduce, is deprecated for a private module's.)"""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, process_group) -> torch.Tensor:
        ctx.process_group = process_group
        total = tensor.clone()
        dist.all_reduce(total, group=process_group)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        total = grad.clone()
        dist.all_reduce(total, group=ctx.process_group)
        return total, None
