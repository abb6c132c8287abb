"""Where a replay's transition bytes live: the column backend its storages write through.

A storage (replay/ring.py, replay/frames.py) keeps its bookkeeping (cursors, frame streams,
validity) in numpy on the host and its transition bytes (observations or frames, actions,
returns, discounts) in *columns* it allocates, writes and reads only through a backend:

- HostColumns (here): numpy arrays in the learner's host memory, the CPU learner's replay;
- learner/device_columns.py: torch tensors in the learner's GPU memory, written on a side CUDA
  stream, so that the update gathers its batch where it trains and only indices cross to the GPU.

Every shard of a replay is a slice of one column per field (replay/sharded.py), so a batch is one
gather per field whichever shards its transitions come from. An index is a tuple of slices and
int64 numpy arrays, as numpy takes it.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class ColumnBackend(Protocol):
    """Allocates, writes and reads the columns of a replay."""

    name: str  # "host" or "device": whether the update gathers its batch itself (learner/replay_feed.py)

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A zeroed column of `shape` and `dtype`."""

    def write(self, column: Any, index: tuple, values: np.ndarray) -> None:
        """column[index] = values."""

    def read(self, column: Any, index: tuple) -> np.ndarray:
        """column[index], as a host numpy array of its own."""

    def nbytes(self, column: Any) -> int:
        """Bytes the column holds."""

    def before_writes(self) -> None:
        """An insert's writes begin (a device backend orders them after the updates that may still
        read the rows they overwrite)."""

    def after_writes(self) -> None:
        """An insert's writes are all issued (a device backend marks them for the next update)."""


class HostColumns:
    """Columns as numpy arrays in this process's memory."""

    name = "host"

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A zeroed numpy array."""
        return np.zeros(shape, dtype)

    def write(self, column: np.ndarray, index: tuple, values: np.ndarray) -> None:
        """column[index] = values."""
        column[index] = values

    def read(self, column: np.ndarray, index: tuple) -> np.ndarray:
        """column[index], an array of its own (fancy indexing copies; a slice is copied)."""
        values = column[index]
        return values if any(isinstance(i, np.ndarray) for i in index) else values.copy()

    def nbytes(self, column: np.ndarray) -> int:
        """Bytes the array holds."""
        return int(column.nbytes)

    def before_writes(self) -> None:
        """Nothing to order on the host: the replay's lock does it."""

    def after_writes(self) -> None:
        """Nothing to mark on the host."""
