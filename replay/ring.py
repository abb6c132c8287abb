"""Preallocated ring storage for n-step transitions, with vectorized add and uniform sampling.

All arrays are allocated once at `capacity` rows when the storage is built, so memory is flat
from the first insert; the oldest rows are overwritten once the ring is full. A whole chunk is
written with at most two slice assignments (the second only when the chunk wraps), and a sample
is one fancy-indexing gather per field: no per-transition Python loop anywhere.

The columns are written and read through a column backend (replay/columns.py): numpy in host
memory, or tensors on the learner's GPU. A sample is an index draw (`index`): which rows, from
which the learner gathers each field where the columns live (GATHER says how).

Invariant (see `check_invariants`): 0 <= size <= capacity, 0 <= cursor < capacity, and
size < capacity implies cursor == size (the ring fills from row 0 before it wraps).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from raypex.replay.columns import ColumnBackend, HostColumns
from raypex.replay.priorities import Placement

# The fields one stored transition has, in the names of the Chunk message (collector -> shard).
TRANSITION_FIELDS = ("obs", "action", "return", "discount", "next_obs")


def action_layout(action_dim: int) -> tuple[tuple[int, ...], np.dtype]:
    """A stored action's shape and dtype: an int64 index, or `action_dim` float32s (Box actions)."""
    return ((action_dim,), np.dtype(np.float32)) if action_dim else ((), np.dtype(np.int64))


def transition_layout(obs_shape: tuple[int, ...], obs_dtype: str,
                      action_dim: int = 0) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape (per row) and dtype of every stored field for an observation shape and dtype (and the
    action's dimensions for Box actions; 0: a Discrete action)."""
    obs = (tuple(obs_shape), np.dtype(obs_dtype))
    return {
        "obs": obs,
        "action": action_layout(action_dim),
        "return": ((), np.dtype(np.float32)),
        "discount": ((), np.dtype(np.float32)),
        "next_obs": obs,
    }


class RingStorage:
    """Fixed-capacity FIFO of transitions stored column-wise.

    `columns` are this storage's rows of a larger allocation (replay/sharded.py gives every shard
    a slice of one column per field); without them the storage allocates its own.
    """

    # training field -> (column, index key of `index`): how the learner gathers a batch
    GATHER: ClassVar[dict[str, tuple[str, str]]] = {name: (name, "row") for name in TRANSITION_FIELDS}

    def __init__(self, capacity: int, layout: Mapping[str, tuple[tuple[int, ...], np.dtype]],
                 backend: ColumnBackend | None = None, columns: dict | None = None):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.backend = backend or HostColumns()
        self.columns = columns if columns is not None else {
            name: self.backend.allocate((capacity, *shape), dtype) for name, (shape, dtype) in layout.items()}
        self.size = 0
        self.cursor = 0  # next row to write
        self.total_added = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the preallocated columns."""
        return sum(self.backend.nbytes(column) for column in self.columns.values())

    def add(self, chunk: Mapping[str, np.ndarray]) -> Placement:
        """Append a chunk (same fields, equal leading length); returns where its transitions went.

        A chunk longer than the capacity keeps only its newest `capacity` rows, as if added in turn.
        A ring slot only ever loses its transition to a new one, so nothing is cleared.
        """
        lengths = {len(chunk[name]) for name in self.columns}
        if len(lengths) != 1:
            raise ValueError(f"chunk fields have different lengths: {sorted(lengths)}")
        count = lengths.pop()
        self.total_added += count
        skip = max(0, count - self.capacity)
        if skip:
            self.cursor = (self.cursor + skip) % self.capacity
            count -= skip
        rows = (self.cursor + np.arange(count)) % self.capacity
        first = min(count, self.capacity - self.cursor)
        write = self.backend.write
        for name, column in self.columns.items():
            values = np.asarray(chunk[name])[skip:]
            write(column, (slice(self.cursor, self.cursor + first),), values[:first])
            if first < count:
                write(column, (slice(0, count - first),), values[first:])
        self.cursor = (self.cursor + count) % self.capacity
        self.size = min(self.capacity, self.size + count)
        return Placement(rows, np.arange(skip, skip + count), np.zeros(0, np.int64))

    def sampleable_rows(self) -> np.ndarray:
        """The rows holding a transition."""
        return np.arange(self.size)

    def sample_rows(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """`count` row indices drawn uniformly (with replacement) from the stored rows."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty storage")
        return rng.integers(0, self.size, size=count)

    def index(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """What the learner gathers sampled `rows` by (any shape; see GATHER)."""
        return {"row": rows}

    def gather(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The stored fields at `rows`, read to host memory (tests, checks)."""
        return {name: self.backend.read(column, (rows,)) for name, column in self.columns.items()}

    def get_state(self) -> dict:
        """The stored rows and cursors, for a replay checkpoint."""
        return {"columns": {k: self.backend.read(v, (slice(0, self.size),)) for k, v in self.columns.items()},
                "size": self.size, "cursor": self.cursor, "total_added": self.total_added}

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output (same layout and capacity)."""
        size = state["size"]
        for name, column in self.columns.items():
            self.backend.write(column, (slice(0, size),), np.asarray(state["columns"][name]))
        self.size, self.cursor, self.total_added = size, state["cursor"], state["total_added"]
        self.check_invariants()

    def check_invariants(self) -> None:
        """Raise AssertionError if the cursor bookkeeping is inconsistent."""
        assert 0 <= self.size <= self.capacity, (self.size, self.capacity)
        assert 0 <= self.cursor < self.capacity, (self.cursor, self.capacity)
        assert self.size == self.capacity or self.cursor == self.size, (self.size, self.cursor)
