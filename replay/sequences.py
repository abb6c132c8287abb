"""Sequence replay storage for recurrent learners (R2D2): steps stored once, sequences as index
ranges over them.

Each env of a collector has a ring of steps (obs, action, reward, discount, first: the step starts
an episode). Every `period` = length - overlap steps of the collector's own stream a sequence starts
at that step in every env, and it holds the `length` steps from there plus the recurrent state the
collector's network had at its first step. A sequence is a slot (env, k) recording nothing but its
state: its steps are read from the env's ring, so overlapping sequences share them and overlap
costs no memory. Sequences run across episode ends (`first` tells the learner where the state
starts again: learner/r2d2_targets.py).

When a collector process is replaced (or the learner's, its replay restored from a checkpoint),
the new process's stream goes on after the stored one; the stored stream's last step gets discount
0, so no return runs from the old process's episodes into the new one's, which start afresh.

A sequence can be sampled once its last step is stored, and no longer once its first step has
been overwritten. Each new sequence takes an env's next slot in turn; `slots_per_env` slots are
enough for every sequence the ring holds, so a slot is reused only after its sequence became
invalid (but where a restarted collector's first sequence starts closer than `period` after the
last stored one, which can cost the oldest sequence one lap early). Every env of a collector
steps together, so stream numbers (steps since the collector's first) are shared by its envs.

The bytes (step columns, states) are columns of a column backend (replay/columns.py) with rows
env * steps_per_env + step (steps) and env * slots_per_env + k (states); the bookkeeping (which
sequence slots are valid) stays in numpy on the host. A sample is an index draw (`index`): each
sequence's state row and the rows of its steps [N, length], gathered where the columns are.
`total_added` counts env steps: the counts of a run are in env steps whatever a row holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from raypex.replay.columns import ColumnBackend, HostColumns
from raypex.replay.contracts import SEPARATOR
from raypex.replay.priorities import Placement
from raypex.replay.ring import action_layout


def sequence_layout(obs_shape: tuple[int, ...], obs_dtype: str, action_dim: int, state_size: int,
                    parts: tuple = ()) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each column's shape per row and dtype: the step columns (a row: one step of one env; an
    `obs.<key>` column per part of observations in parts, `parts` their (key, shape, dtype)) and
    `state` (a row: one sequence slot's recurrent state). The state is kept in float16: half the
    bytes, which at R2D2's 2 x 128 units and a sequence every 40 steps is 13 B per step instead of
    26, for an LSTM state whose h lies in [-1, 1] and whose error the burn-in washes out."""
    # a Discrete action as int32 (any action space gymnasium's Discrete holds): 4 B a step less
    action = action_layout(action_dim) if action_dim else ((), np.dtype(np.int32))
    observations = ({f"obs{SEPARATOR}{key}": (tuple(shape), np.dtype(dtype)) for key, shape, dtype in parts} if parts
                    else {"obs": (tuple(obs_shape), np.dtype(obs_dtype))})
    return {**observations, "action": action,
            "reward": ((), np.dtype(np.float32)), "discount": ((), np.dtype(np.float32)),
            "first": ((), np.dtype(np.bool_)), "state": ((state_size,), np.dtype(np.float16))}


def column_rows(layout: Mapping, step_rows: int, slot_rows: int) -> dict[str, int]:
    """Each column's rows: one per stored step, `state` one per sequence slot."""
    return {name: slot_rows if name == "state" else step_rows for name in layout}


def sequence_geometry(capacity: int, num_envs: int, length: int, overlap: int) -> tuple[int, int]:
    """(steps per env, sequence slots per env) of a storage holding `capacity` env steps."""
    if not 0 <= overlap < length:
        raise ValueError(f"a sequence's overlap must be at least 0 and below its length {length}, got {overlap}")
    period = length - overlap
    steps_per_env = max(math.ceil(capacity / num_envs), length + period)
    return steps_per_env, steps_per_env // period + 1


class SequenceStorage:
    """Per-env step rings and the sequences over them (see the module docstring).

    `add` takes a SequenceChunk: obs [F, E, ...], action, reward, discount, first [F, E], the stream
    number of its first step (`first_index`), `state` [S, E, state_size]: the recurrent state at
    each step of the chunk whose stream number is a multiple of `period`, in order, and optionally
    `real` [F, E]: which steps were env steps (the others are stored but not counted).
    """

    def __init__(self, capacity: int, num_envs: int, length: int, overlap: int, obs_shape: tuple[int, ...],
                 obs_dtype: str, state_size: int, backend: ColumnBackend | None = None, action_dim: int = 0,
                 columns: dict | None = None, parts: tuple = ()):
        """`capacity`: env steps held (over all envs); `length` and `overlap`: a sequence's steps and
        those it shares with the next. `columns`: this storage's rows of a larger allocation
        (replay/sharded.py), shaped as `column_rows` says; without them it allocates its own.
        `parts`: (key, shape, dtype) of observations in parts."""
        layout = sequence_layout(obs_shape, obs_dtype, action_dim, state_size, parts)
        self.step_fields = [name for name in layout if name != "state"]
        # training field -> (column, index key of `index`): how the learner gathers a batch
        self.GATHER = {**{name: (name, "steps") for name in self.step_fields}, "state": ("state", "row")}
        self.num_envs, self.length, self.period = num_envs, length, length - overlap
        self.steps_per_env, self.slots_per_env = sequence_geometry(capacity, num_envs, length, overlap)
        self.capacity = num_envs * self.slots_per_env  # sequence slots: what priorities index
        self.backend = backend or HostColumns()
        if columns is None:
            rows = column_rows(layout, num_envs * self.steps_per_env, self.capacity)
            columns = {name: self.backend.allocate((rows[name], *shape), dtype)
                       for name, (shape, dtype) in layout.items()}
        self.columns = columns
        self.start = np.full(self.capacity, -1, np.int64)  # each slot's first stream number (-1: none)
        self.written = 0  # steps written per env stream
        self.renumber = 0  # added to incoming stream numbers (a restarted collector counts from 0)
        self.started = 0  # sequences started per env: each takes the next slot, round the env's slots
        self.total_added = 0  # env steps stored, over all envs
        self._valid_rows: np.ndarray | None = None

    @property
    def size(self) -> int:
        """Sequences that can be sampled now."""
        return len(self._rows())

    @property
    def step_capacity(self) -> int:
        """Env steps it can hold, over all envs."""
        return self.num_envs * self.steps_per_env

    @property
    def steps_held(self) -> int:
        """Env steps held now, over all envs (what the replay's minimum size counts)."""
        return min(self.written, self.steps_per_env) * self.num_envs

    @property
    def nbytes(self) -> int:
        """Bytes held by the preallocated columns and bookkeeping."""
        return sum(self.backend.nbytes(column) for column in self.columns.values()) + self.start.nbytes

    def _rows(self) -> np.ndarray:
        if self._valid_rows is None:
            oldest = self.written - self.steps_per_env
            self._valid_rows = np.flatnonzero((self.start >= max(oldest, 0)) & (self.start + self.length <= self.written)
                                              & (self.start >= 0))
        return self._valid_rows

    def add(self, chunk: Mapping) -> Placement:
        """Write a chunk's steps and the states of the sequences starting in it; returns the
        sequence slots completed by it (placed), and those whose first step it overwrote (cleared)."""
        count = len(chunk["action"])
        first = int(chunk["first_index"]) + self.renumber
        if first != self.written:  # a restarted collector: its stream goes on after the stored one
            self.renumber += self.written - first
            first = self.written
            self._end_stream()
        before = self._rows()
        before_starts = self.start[before].copy()
        numbers = first + np.arange(count)
        keep = numbers >= first + count - self.steps_per_env  # a chunk longer than the ring keeps its newest steps
        envs = np.arange(self.num_envs)[:, None]
        rows = (envs * self.steps_per_env + (numbers[keep] % self.steps_per_env)[None, :]).ravel()
        for name in self.step_fields:
            values = np.asarray(chunk[name])[keep]
            self.backend.write(self.columns[name], (rows,),
                               np.ascontiguousarray(values.swapaxes(0, 1)).reshape(len(rows), *values.shape[2:]))
        # sequences start where the collector took a state: every `period` steps of its own stream
        starts = numbers[(numbers - self.renumber) % self.period == 0]
        states = np.asarray(chunk["state"], np.float32)
        if len(states) != len(starts):
            raise ValueError(f"a chunk of steps {first}..{first + count - 1} starts {len(starts)} sequences "
                             f"(every {self.period} steps) and brings {len(states)} states")
        for number, state in zip(starts, states, strict=True):
            slots = np.arange(self.num_envs) * self.slots_per_env + self.started % self.slots_per_env
            self.started += 1
            self.start[slots] = number
            self.backend.write(self.columns["state"], (slots,), state)
        self.written = first + count
        # an autoreset's pad step (actors/sequence_adder.py) is stored but is no env step
        self.total_added += int(np.asarray(chunk["real"])[keep].sum()) if "real" in chunk else count * self.num_envs
        self._valid_rows = None
        after = self._rows()
        # a slot is cleared when the sequence it held is no longer valid (gone, or its slot taken by
        # a newer one), placed when it holds a valid sequence it did not hold before
        cleared = before[(self.start[before] != before_starts) | ~np.isin(before, after)]
        was = dict(zip(before.tolist(), before_starts.tolist(), strict=True))
        placed = np.array([row for row in after.tolist() if was.get(row) != self.start[row]], np.int64)
        return Placement(placed, np.arange(len(placed)), cleared)

    def _end_stream(self) -> None:
        """The stored stream's last step ends its episode for learning (discount 0): the next steps
        come from another collector process, whose episodes start afresh (`first`), and no return
        may run from one into the other."""
        if self.written == 0:
            return
        last = np.arange(self.num_envs) * self.steps_per_env + (self.written - 1) % self.steps_per_env
        self.backend.write(self.columns["discount"], (last,), np.zeros(self.num_envs, np.float32))

    def sampleable_rows(self) -> np.ndarray:
        """The sequence slots that can be sampled now."""
        return self._rows()

    def index(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """What the learner gathers sequences at slots `rows` ([N]) by: their state rows and the
        rows of their steps [N, length]."""
        env = rows // self.slots_per_env
        numbers = self.start[rows][:, None] + np.arange(self.length)[None, :]
        return {"row": rows, "steps": env[:, None] * self.steps_per_env + numbers % self.steps_per_env}

    def gather(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The sequences at `rows` read to host memory: steps [N, length, ...], state [N, state_size]."""
        index = self.index(rows)
        return {field: self.backend.read(self.columns[column], (index[key],))
                for field, (column, key) in self.GATHER.items()}

    def get_state(self) -> dict:
        """Every column, the bookkeeping and the counters, for a replay checkpoint."""
        state = {name: self.backend.read(column, (slice(None),)) for name, column in self.columns.items()}
        state.update(start=self.start.copy(), written=self.written, renumber=self.renumber, started=self.started,
                     total_added=self.total_added)
        return state

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output (same capacity, envs, length and overlap)."""
        for name, column in self.columns.items():
            self.backend.write(column, (slice(None),), np.asarray(state[name]).reshape(column.shape))
        self.start[...] = state["start"]
        self.written, self.renumber, self.total_added = state["written"], state["renumber"], state["total_added"]
        self.started = state["started"]
        self._valid_rows = None
