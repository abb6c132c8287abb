"""Moves Batch messages (numpy) onto the learner's device as tensors.

On CPU the arrays are wrapped without a copy. On CUDA each batch is copied once into one of two
pinned host buffers and sent to the GPU with a non-blocking copy; the feed always keeps the next
batch's copy in flight while the caller computes on the current one, so the host->device transfer
overlaps with the previous update. Pixels stay uint8 until they are on the device.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import torch

from replay.messages import Batch

TRAINING_FIELDS = ("obs", "action", "return", "discount", "next_obs", "weight")


# Object-store arrays are read-only and the learner never writes to them. Filtered once for the
# process: a catch_warnings block per array cost more than the conversion itself.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(array))


class DeviceFeed:
    """Pulls batches from `next_batch` and yields dicts of device tensors, one batch ahead on CUDA."""

    def __init__(self, next_batch: Callable[[], Batch], device: torch.device):
        self.next_batch = next_batch
        self.device = device
        self.cuda = device.type == "cuda"
        self._pinned: list[dict[str, torch.Tensor]] = [{}, {}]
        self._copied: list[torch.cuda.Event | None] = [None, None]
        self._slot = 0
        self._ahead: dict[str, torch.Tensor] | None = None

    def next(self) -> dict[str, torch.Tensor]:
        """The next batch on the device (its copy was started during the previous call on CUDA)."""
        if not self.cuda:
            batch = self.next_batch()
            return {name: _tensor(batch[name]) for name in TRAINING_FIELDS}
        current = self._ahead if self._ahead is not None else self._start_copy(self.next_batch())
        self._ahead = self._start_copy(self.next_batch())
        return current

    def _start_copy(self, batch: Batch) -> dict[str, torch.Tensor]:
        slot = self._slot
        self._slot ^= 1
        event = self._copied[slot]
        if event is not None:
            event.synchronize()  # the pinned buffer's previous copy must finish before reuse
        pinned = self._pinned[slot]
        on_device = {}
        for name in TRAINING_FIELDS:
            host = _tensor(batch[name])
            buf = pinned.get(name)
            if buf is None or buf.shape != host.shape or buf.dtype != host.dtype:
                buf = pinned[name] = torch.empty(host.shape, dtype=host.dtype, pin_memory=True)
            buf.copy_(host)
            on_device[name] = buf.to(self.device, non_blocking=True)
        self._copied[slot] = torch.cuda.Event()
        self._copied[slot].record()
        return on_device
