"""PriorityFeedback: each update's new |TD errors| back to the shards that served its batches.

Prioritized replay needs the learner to tell the shards what it learned about every transition it
trained on. After an update, the |TD error| of each of its G x B transitions is grouped by the
shard process that served its micro-batch (SampledKeys say which, and which slots), so a shard
gets one PriorityUpdate per update at most, never one per transition. Sending goes through the
injected `send` seam, which must not block (the Ray one drops what is over its in-flight bound).

On the CPU the errors are host tensors already. On CUDA they are copied to pinned host memory on
the update's stream without waiting, and the message goes out at a later update, once the copy
is known to be done (an event query, never a synchronize): the update loop never waits for it.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from replay.contracts import PriorityUpdate, SampledKeys, SendPriorities, merged_by_process

PENDING = 4  # CUDA updates whose errors may be on their way to the host at once


def group_by_shard(keys: list[SampledKeys], td_abs: np.ndarray) -> list[PriorityUpdate]:
    """One PriorityUpdate per shard process among `keys` (micro-batch g's errors are td_abs[g])."""
    return merged_by_process([PriorityUpdate(key.shard, key.incarnation, key.index, key.stamp,
                                             td_abs[g].astype(np.float32)) for g, key in enumerate(keys)])


class PriorityFeedback:
    """Turns the |TD errors| an update left in a [G, B] tensor into messages to the shards."""

    def __init__(self, send: SendPriorities, device: torch.device):
        self.send = send
        self.device = device
        self._pending: deque[tuple[torch.cuda.Event, torch.Tensor, list[SampledKeys]]] = deque()
        self._free_buffers: list[torch.Tensor] = []
        self.unsent = 0  # transitions whose errors were not sent (keys missing, or CUDA copies backed up)

    def after_update(self, keys: list[SampledKeys | None], td_abs: torch.Tensor) -> None:
        """Send (or, on CUDA, start copying) the errors of the update just run or enqueued."""
        if any(key is None for key in keys):  # batches not from replay (the bench's from-memory feed)
            self.unsent += td_abs.numel()
            return
        if self.device.type != "cuda":
            self.send(group_by_shard(keys, td_abs.numpy()))
            return
        self._send_copied()
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
        """Send every update's errors still on their way to the host, waiting for their copies
        (the end of a run: the update loop has stopped, so waiting costs it nothing)."""
        for copied, _, _ in self._pending:
            copied.synchronize()
        self._send_copied()

    def _send_copied(self) -> None:
        while self._pending and self._pending[0][0].query():
            _, host, keys = self._pending.popleft()
            self.send(group_by_shard(keys, host.numpy()))
            self._free_buffers.append(host)
