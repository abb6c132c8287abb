"""DeviceColumns: a replay's columns in the learner's GPU memory (the column backend of
replay/columns.py for CUDA).

An insert's fields are copied host -> pinned -> device once each, on a CUDA stream of their own,
so they never queue behind the update loop's work. Two events order the streams on the GPU,
never the host:
- `before_writes` makes the insert stream wait for the newest update enqueued so far
  (`reading`): rows an insert overwrites are not read by an update drawn before it;
- `after_writes` records `written`; the update loop makes its stream wait for it before the next
  update (ReplayFeed), so rows a draw finds valid have their bytes on the device.
Both happen under the replay's lock (replay/sharded.py), which makes "drawn" and "inserted"
one order on the host too.

Whether a replay fits the GPU is decided before it is allocated (`choose_columns`): the
columns, plus room for the update's own memory.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

# Chunks arrive from Ray's object store as read-only arrays; they are only read.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

# What the update itself needs besides replay (networks, optimizer, activations, the graph's pool):
# measured at most a few GiB for the Nature CNN at 512x4; kept free with a margin.
UPDATE_RESERVE_BYTES = 6 << 30


def choose_columns(storage: str, device: torch.device, replay_bytes: int):
    """(the column backend for a replay of `replay_bytes`, a one-line notice or None).

    `storage` is replay.storage: device, host, or auto = the GPU when the replay fits there with
    UPDATE_RESERVE_BYTES to spare, else host memory (each batch gathered there and copied over
    from pinned memory), said in the notice. A CPU learner's
    replay is in host memory whatever was asked."""
    from raypex.replay.columns import HostColumns

    if device.type != "cuda" or storage == "host":
        return HostColumns(), None
    free, _ = torch.cuda.mem_get_info(device)
    if storage == "auto" and replay_bytes + UPDATE_RESERVE_BYTES > free:
        return HostColumns(), (f"replay ({replay_bytes / 2**30:.1f} GiB) does not fit the GPU's {free / 2**30:.1f} GiB "
                               f"free with {UPDATE_RESERVE_BYTES >> 30} GiB for the update: it is kept in host memory "
                               "and batches are gathered there (slower; replay.storage=host says so without this line)")
    return DeviceColumns(device), None


class DeviceColumns:
    """Columns as CUDA tensors, written on a side stream (see the module docstring)."""

    name = "device"

    def __init__(self, device: torch.device):
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.reading: torch.cuda.Event | None = None  # after the newest update enqueued (ReplayFeed sets it)
        self.written: torch.cuda.Event | None = None  # after the newest insert's copies

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> torch.Tensor:
        """A zeroed tensor on the device."""
        return torch.zeros(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype, device=self.device)

    def to_device(self, array: np.ndarray) -> torch.Tensor:
        """`array` on the device, copied once from pinned memory without waiting (on the current
        stream)."""
        host = torch.from_numpy(np.ascontiguousarray(array)).pin_memory()
        return host.to(self.device, non_blocking=True)  # the pinned block is kept until the copy is done

    def before_writes(self) -> None:
        """Order this insert's writes after every update enqueued before it."""
        if self.reading is not None:
            self.stream.wait_event(self.reading)

    def write(self, column: torch.Tensor, index: tuple, values: np.ndarray) -> None:
        """column[index] = values, issued on the insert stream."""
        with torch.cuda.stream(self.stream):
            where = tuple(self.to_device(i) if isinstance(i, np.ndarray) else i for i in index)
            column[where] = self.to_device(values)

    def after_writes(self) -> None:
        """Mark this insert's writes for the next update to wait for."""
        written = torch.cuda.Event()
        written.record(self.stream)
        self.written = written

    def read(self, column: torch.Tensor, index: tuple) -> np.ndarray:
        """column[index] on the host (checkpoints, checks: waits for the device)."""
        torch.cuda.synchronize(self.device)
        where = tuple(torch.from_numpy(i).to(self.device) if isinstance(i, np.ndarray) else i for i in index)
        return column[where].cpu().numpy()

    def nbytes(self, column: torch.Tensor) -> int:
        """Bytes the tensor holds."""
        return column.numel() * column.element_size()
