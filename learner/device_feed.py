"""DeviceFeed: turns Batch messages (numpy, one micro-batch each) into the tensors of one update,
every field stacked to the leading shape [G, B] (G micro-batches of B transitions).

Threaded (`threads` >= 1, the default on CUDA), a feeder thread does all the host work of an update ahead of the
update loop: G calls to `next_batch` (which wait on Ray), the copy into pinned host memory and the
host-to-device copy on the feed's own CUDA stream. `SLOTS` slots (pinned host buffers plus device
buffers) rotate between the two threads: the loop takes a filled slot, waiting only when none is
ready (that wait, and only that, is the learner waiting for data: `wait_s`), and hands it back with
an event recorded after the update that read it; the feeder refills it once that event has passed.
With `threads` > 1 several feeder threads fill slots at once: they take turns calling
`next_batch` (the Ray batch source is not thread-safe) and copy in parallel, so updates may come
in another order than their batches were fetched.
Pixels stay uint8 until they are on the device, and pixel batches keep their frames once (a
FrameBatch): the update builds the stacks there.

Unthreaded (`threads` = 0, the CPU default), `next_update` calls `next_batch` itself; the arrays are wrapped
without a copy when G is 1. A threaded feed on the CPU fetches on its thread and wraps the same way
(no pinned memory, no streams).

Batches from prioritized replay carry `keys` (which shard and slots): they stay on the host, and
`taken_keys` gives those of the update last handed out, for its priority update.

An error raised by `next_batch` (TrainingStopped at the end of a run, a dead shard) is raised by
`next_update`, then and on every later call.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
from collections import deque

import numpy as np
import torch

from replay.contracts import Batch, NextBatch, SampledKeys, batch_fields

SLOTS = 4  # two being read by queued updates, two being filled

# Object-store arrays are read-only and the learner never writes to them. Filtered once for the
# process: a catch_warnings block per array cost more than the conversion itself.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(array))


def stack_micro_batches(batches: list[Batch]) -> dict[str, torch.Tensor]:
    """The training fields of G micro-batches as [G, B, ...] CPU tensors (no copy when G is 1)."""
    fields = batch_fields(batches[0])
    if len(batches) == 1:
        return {name: _tensor(batches[0][name]).unsqueeze(0) for name in fields}
    return {name: torch.stack([_tensor(b[name]) for b in batches]) for name in fields}


class _Slot:
    """Pinned host buffers and device buffers for one update, and the events that guard them."""

    def __init__(self):
        self.host: dict[str, torch.Tensor] = {}
        self.device: dict[str, torch.Tensor] = {}
        self.filled: torch.cuda.Event | None = None  # recorded after the host-to-device copy
        self.read: torch.cuda.Event | None = None  # recorded after the update that read it
        self.keys: list[SampledKeys | None] = []

    def fill(self, batches: list[Batch], device: torch.device, stream: torch.cuda.Stream | None) -> None:
        """Copy G micro-batches into the pinned buffers, then to the device on `stream` (on the
        CPU, with no stream, only wrap them)."""
        self.keys = [batch.get("keys") for batch in batches]
        if stream is None:
            self.device = stack_micro_batches(batches)
            return
        if self.read is not None:
            self.read.synchronize()  # the update that read this slot is done with it
        fields = batch_fields(batches[0])
        for name in fields:
            first = np.asarray(batches[0][name])
            shape = (len(batches), *first.shape)
            host = self.host.get(name)
            if host is None or tuple(host.shape) != shape or host.dtype != _tensor(first).dtype:
                host = self.host[name] = torch.empty(shape, dtype=_tensor(first).dtype, pin_memory=True)
                self.device[name] = torch.empty(shape, dtype=host.dtype, device=device)
            for g, batch in enumerate(batches):
                host[g].copy_(_tensor(batch[name]))
        with torch.cuda.stream(stream):
            for name in fields:
                self.device[name].copy_(self.host[name], non_blocking=True)
            self.filled = torch.cuda.Event()
            self.filled.record(stream)


class DeviceFeed:
    """Yields one update's micro-batches at a time on the learner's device (see module docstring)."""

    def __init__(self, next_batch: NextBatch, device: torch.device, micro_batches: int, threads: int):
        self.next_batch = next_batch
        self.device = device
        self.micro_batches = micro_batches
        self.threads = threads  # 0: no feeder thread, `next_update` fetches
        self.threaded = threads > 0
        self.wait_s = 0.0
        self._error: BaseException | None = None
        self._free: queue.Queue = queue.Queue()
        self._ready: queue.Queue = queue.Queue()
        self._taken: deque[_Slot] = deque()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._fetching = threading.Lock()  # one caller of next_batch at a time (see take_batches)
        self._last_keys: list[SampledKeys | None] = []

    def next_update(self) -> dict[str, torch.Tensor]:
        """The next update's fields, [G, B, ...], ready to be read on the current stream."""
        if self._error is not None:
            raise self._error
        if not self.threaded:
            try:
                batches = [self.next_batch() for _ in range(self.micro_batches)]
            except BaseException as err:
                self._error = err
                raise
            self._last_keys = [b.get("keys") for b in batches]
            batch = stack_micro_batches(batches)
            if self.device.type == "cpu":
                return batch
            return {name: tensor.to(self.device) for name, tensor in batch.items()}
        if not self._threads:
            self._start()
        start = time.perf_counter()
        item = self._ready.get()
        self.wait_s += time.perf_counter() - start
        if isinstance(item, BaseException):
            self._error = item
            raise item
        if item.filled is not None:
            torch.cuda.current_stream(self.device).wait_event(item.filled)
        self._taken.append(item)
        return item.device

    def taken_keys(self) -> list[SampledKeys | None]:
        """The SampledKeys of each micro-batch of the update `next_update` returned last (None
        for a batch without them)."""
        return self._taken[-1].keys if self._taken else self._last_keys

    def release(self, read: torch.cuda.Event | None) -> None:
        """Hand back the oldest slot taken, reusable once `read` (recorded after the update that
        read it) has passed. Unthreaded, nothing is held and this does nothing."""
        if self._taken:
            slot = self._taken.popleft()
            slot.read = read
            self._free.put(slot)

    def take_batches(self, count: int) -> list[Batch]:
        """`count` micro-batches straight from `next_batch`, safe beside the feeder thread (the
        bench keeps real batches this way to feed the learner from memory)."""
        with self._fetching:
            return [self.next_batch() for _ in range(count)]

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the feeder thread after the update it is preparing and wait for it (a thread left
        copying to the GPU while the process exits can abort the interpreter)."""
        self._closed = True
        for thread in self._threads:
            self._free.put(None)
        for thread in self._threads:
            thread.join(timeout_s)

    def _start(self) -> None:
        for _ in range(SLOTS + self.threads - 1):
            self._free.put(_Slot())
        for i in range(self.threads):
            thread = threading.Thread(target=self._feed, name=f"raypex-device-feed-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _feed(self) -> None:
        stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        try:
            while not self._closed:
                slot = self._free.get()
                if slot is None:
                    return
                with self._fetching:
                    batches = [self.next_batch() for _ in range(self.micro_batches)]
                slot.fill(batches, self.device, stream)
                self._ready.put(slot)
        except BaseException as err:  # noqa: BLE001 - any error is handed to the update loop, which raises it
            self._ready.put(err)
