"""PriorityFeedback: each update's new |TD errors| back to the replay it drew from.

Prioritized replay needs the learner to tell the replay what it learned about every transition it
trained on. The replay lives in the learner's process (replay/sharded.py), so the errors of an
update's G x B transitions go to `ShardedReplay.update_priorities` with the keys of its draw: no
message, no round trip.

On the CPU the errors are host tensors already; on CUDA they are copied to pinned host memory on
the update's stream without waiting, and taken at a later update, once the copy is known to be
done (an event query, never a synchronize): the update loop never waits for them. Either way they
are applied APPLY_EVERY updates at a time: one sum-tree update of many slots costs little more
than one of a single update's (its cost is numpy's per-level overhead, BENCHMARKS.md (git history)), and stale
ones are dropped by their stamps whenever they land.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from raypex.replay.sharded import SampledKeys, ShardedReplay

PENDING = 8  # CUDA updates whose errors may be on their way to the host at once
APPLY_EVERY = 4  # updates whose errors are applied together


class PriorityFeedback:
    """Applies the |TD errors| an update left in a [G, B] tensor to the replay."""

    def __init__(self, replay: ShardedReplay, device: torch.device):
        self.replay = replay
        self.device = device
        self._pending: deque[tuple[torch.cuda.Event, torch.Tensor, SampledKeys]] = deque()
        self._free_buffers: list[torch.Tensor] = []
        self._ready: list[tuple[SampledKeys, np.ndarray]] = []  # copied, not applied yet
        self.unsent = 0  # transitions whose errors were not applied (no keys, or CUDA copies backed up)

    def after_update(self, keys: SampledKeys | None, td_abs: torch.Tensor) -> None:
        """Apply (or, on CUDA, start copying) the errors of the update just run or enqueued."""
        if keys is None:  # batches not drawn from replay (the bench's reference)
            self.unsent += td_abs.numel()
            return
        if self.device.type != "cuda":
            self._ready.append((keys, td_abs.numpy().copy()))  # the step writes the same buffer next update
            if len(self._ready) >= APPLY_EVERY:
                self._apply()
            return
        self._take_copied()
        if len(self._ready) >= APPLY_EVERY:
            self._apply()
        if len(self._pending) >= PENDING:
            self.unsent += td_abs.numel()
            return
        host = self._free_buffers.pop() if self._free_buffers else torch.empty(
            td_abs.shape, dtype=td_abs.dtype, pin_memory=True)
        host.copy_(td_abs, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        self._pending.append((copied, host, keys))

    def flush(self) -> None:
        """Apply every update's errors still on their way to the host, waiting for their copies
        (the end of a run: the update loop has stopped, so waiting costs it nothing)."""
        for copied, _, _ in self._pending:
            copied.synchronize()
        self._take_copied()
        self._apply()

    def _take_copied(self) -> None:
        while self._pending and self._pending[0][0].query():
            _, host, keys = self._pending.popleft()
            self._ready.append((keys, host.numpy().copy()))
            self._free_buffers.append(host)

    def _apply(self) -> None:
        if not self._ready:
            return
        keys = SampledKeys(*(np.concatenate([getattr(k, f).reshape(-1) for k, _ in self._ready])
                             for f in ("shard", "row", "stamp")))
        self.replay.update_priorities(keys, np.concatenate([td.reshape(-1) for _, td in self._ready]))
        self._ready.clear()
