"""Several learners as one: each update, every learner's gradient of its own part of the group's
batch, summed over a torch.distributed process group so that each steps with the gradient of the
whole batch.

Each learner draws its part of the batch from the shards it holds (replay/group_draw.py), a
different number each update, possibly none. An update step's loss is the mean over the batch it
was given; the whole batch's mean is the sum over learners of each part's mean times its share of
the batch (count / total). So before clipping and stepping, an algorithm's step calls `reduce`
on the parameters it is about to step: each learner's gradients are weighed by its share and
summed across the group (one all-reduce of one flat tensor per optimizer's parameters). Every
learner then holds the same gradient, clips and steps alike, and the networks stay identical on
every learner without being sent.

A learner whose part is empty gets a batch of zero micro-batches: its step computes no loss, its
gradients count as zeros, and it still joins the all-reduce (every learner must, each update).

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

    def reduce(self, params: list[torch.Tensor]) -> None:
        """Every learner's gradients of `params`, each weighed by its share of the batch, summed:
        the gradient of the whole batch's mean loss, the same on every learner."""
        start = time.perf_counter()
        share = self.part.count / self.part.total
        grads = [p.grad if p.grad is not None and self.part.count else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads]) * share
        dist.all_reduce(flat, group=self.process_group)
        offset = 0
        for p in params:
            p.grad = flat[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        self.reduce_s += time.perf_counter() - start

    def own_rows(self, noise: torch.Tensor, dim: int) -> torch.Tensor:
        """The rows of `noise` drawn for the whole batch along `dim` that belong to this learner's part."""
        return noise.narrow(dim, self.part.offset, self.part.count)
