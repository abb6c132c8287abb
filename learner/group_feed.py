"""GroupFeed: each update's part of the batch for a learner of a group (learner/gradient_group.py).

Every update, every learner of the group, in step:
1. all-gathers one small tensor: its replay's share (replay/group_draw.py), its inserted and held
   env steps, its shards, and whether it is stopping; the others' counts go to its replay, which
   figures the collectors' insert room from the whole group's (replay/group_draw.py OtherLearners);
2. from those same figures decides alike whether the group may draw now (the samples-per-insert
   limiter over the whole group's counts) or waits for inserts and asks again, and ends the epoch
   alike when any learner is stopping (a learner leaving the collective alone would hang the rest);
3. splits the batch with a generator seeded alike (`split_batch`), sets its GradientGroup's part,
   and draws and gathers its own part from its shards, weighed by the group's figures.

A part is the part's rows of the group's G x B batch as one micro-batch, [1, count, ...]; an
empty one is [1, 0, ...], and its update still joins every collective of the group. Host-side
replay only (the replay on a GPU draws indices into columns on the device, which a group does not
do yet).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from raypex.learner.gradient_group import BatchPart, GradientGroup
from raypex.replay.contracts import TrainingStopped
from raypex.replay.group_draw import GroupFigures, OtherLearners, ReplayShare, group_figures, split_batch
from raypex.replay.sharded import ShardedReplay

_WAIT_S = 0.05  # the longest one wait for a local insert lasts before the group asks again


class Gathered(NamedTuple):
    """What one all-gather told every learner alike."""

    shares: list[ReplayShare]  # each learner's
    group: GroupFigures  # the whole group's, from the shares
    inserted: int  # env steps inserted into every learner's shards
    held: int  # env steps held now in every learner's shards
    stopping: bool  # whether any learner is stopping


class GroupFeed:
    """Hands a learner of a group its part of each update's batch (see the module docstring)."""

    on_device = False
    stops_with_its_group = True  # the Learner's epoch ends when this feed raises TrainingStopped

    def __init__(self, replay: ShardedReplay, batch: int, gradients: GradientGroup, seed: int,
                 should_stop: Callable[[], bool]):
        """`batch`: the group's batch per update; `seed` the same on every learner of the group."""
        if replay.backend.name == "device":
            raise ValueError("a learner of a group draws from replay on the host")
        self.replay = replay
        self.batch = batch
        self.gradients = gradients
        self.splitter = np.random.default_rng(seed)
        self.should_stop = should_stop
        self.rank = dist.get_rank(gradients.process_group)
        self.learners = dist.get_world_size(gradients.process_group)
        self.keys = None  # of this learner's last part (prioritized replay)
        self.wait_s = 0.0
        self.fill_wait_s = 0.0

    def _gather(self) -> Gathered:
        """One all-gather of every learner's share, inserted and held env steps and stop."""
        replay = self.replay
        mine = np.concatenate([replay.share().as_array(), [replay.inserted, replay.steps_held,
                                                           float(self.should_stop()), len(replay.shards)]])
        local = torch.from_numpy(mine)
        everyone = [torch.empty_like(local) for _ in range(self.learners)]
        dist.all_gather(everyone, local, group=self.gradients.process_group)
        figures = torch.stack(everyone).numpy()
        shares = [ReplayShare.from_array(row[:4]) for row in figures]
        others = np.delete(figures, self.rank, axis=0).sum(axis=0)  # column 3 of a share: its sampled
        with replay.lock:
            replay.others = OtherLearners(int(others[4]), int(others[3]), int(others[5]), int(others[7]))
        return Gathered(shares, group_figures(shares), int(figures[:, 4].sum()), int(figures[:, 5].sum()),
                        bool(figures[:, 6].any()))

    def _allowed(self, seen: Gathered) -> bool:
        """Whether the group may draw its batch now (the limiter over the whole group's counts)."""
        needed = self.batch * self.replay.spec.samples_per_draw
        return seen.group.size > 0 and self.replay.limiter.can_sample(seen.held, seen.inserted, seen.group.sampled,
                                                                      needed)

    @contextlib.contextmanager
    def update_slot(self, limited: bool = True, updates_left: int = 1) -> Iterator[dict[str, torch.Tensor]]:
        """This learner's part of the next update's batch, [1, part, ...] (or [0, 0, ...] when empty)."""
        seen = self._gather()
        while True:
            if seen.stopping:
                raise TrainingStopped("a learner of the group is stopping")
            if self._allowed(seen) or not limited and seen.group.mass > 0:
                break
            self.replay.wait_for_insert(self.batch, _WAIT_S)
            seen = self._gather()
        split = split_batch(seen.shares, self.batch, self.splitter)
        part = BatchPart(int(split[:self.rank].sum()), int(split[self.rank]), self.batch)
        self.gradients.part = part
        yield self._draw(part.count, seen.group)

    def _draw(self, count: int, figures: GroupFigures) -> dict[str, torch.Tensor]:
        replay = self.replay
        if not count:
            self.keys = None
            empty = {field: np.empty((1, 0, *replay.columns[column].shape[1:]), replay.columns[column].dtype)
                     for field, (column, _) in replay.gather_plan.items()}
            if replay.tree is not None:  # prioritized: importance weights
                empty["weight"] = np.empty((1, 0), np.float32)
            return {name: torch.from_numpy(array) for name, array in empty.items()}
        with replay.lock:
            draw = replay.draw(1, count, figures)
            arrays = replay.gather(draw)
        self.keys = draw.keys
        return {name: torch.from_numpy(array) for name, array in arrays.items()}
