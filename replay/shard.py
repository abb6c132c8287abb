"""ReplayShard: one collector's part of the replay, inside the learner's process.

A plain class (no Ray import). It owns its storage (a `RingStorage`, or a `FrameStorage` for
pixels, whose columns are its rows of the replay's allocation: replay/sharded.py), counts what
its collector inserted and what the learner sampled from it, knows how far its collector had
come (a restarted collector counts on from there) and, with prioritized replay, keeps a
PriorityIndex over its slots (replay/priorities.py). Sampling across shards is ShardedReplay's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from raypex.replay.columns import ColumnBackend
from raypex.replay.contracts import Chunk, FrameChunk, PriorityStats, ShardStats
from raypex.replay.frames import FrameStorage, frame_layout, frame_slots
from raypex.replay.priorities import PriorityIndex, PrioritySettings
from raypex.replay.ring import RingStorage, transition_layout
from raypex.replay.sequences import SequenceStorage, column_rows, sequence_geometry, sequence_layout


@dataclass(frozen=True)
class StorageSpec:
    """What a shard's storage holds: whole transitions, (frame_stack > 0) stacked pixel
    observations stored frame-once for a collector with `num_envs` envs (with `obs_parts`, each
    step's observation parts once, frame_stack 1), or (sequence_length > 0) steps and the
    sequences over them with their recurrent state (state_size values, in float16)."""

    capacity: int  # env steps
    obs_shape: tuple[int, ...]
    obs_dtype: str
    frame_stack: int = 0
    num_envs: int = 1
    action_dim: int = 0  # > 0: Box actions of this many float32s
    sequence_length: int = 0
    sequence_overlap: int = 0
    state_size: int = 0
    obs_parts: tuple[tuple[str, tuple[int, ...], str], ...] = ()  # (key, shape, dtype) of each part

    @property
    def rows(self) -> int:
        """The slots one shard's storage draws from: transitions, frame slots or sequences."""
        if self.frame_stack:
            return frame_slots(self.capacity, self.num_envs, self.frame_stack)
        if self.sequence_length:
            return self.num_envs * self._sequence_geometry()[1]
        return self.capacity

    def _sequence_geometry(self) -> tuple[int, int]:
        return sequence_geometry(self.capacity, self.num_envs, self.sequence_length, self.sequence_overlap)

    def column_rows(self) -> dict[str, int]:
        """The rows of the column backend each column of one shard's storage takes."""
        if self.sequence_length:
            steps_per_env, slots_per_env = self._sequence_geometry()
            return column_rows(self.layout(), self.num_envs * steps_per_env, self.num_envs * slots_per_env)
        return dict.fromkeys(self.layout(), self.rows)

    @property
    def samples_per_draw(self) -> int:
        """Env steps one drawn slot trains on: a sequence's length, else 1 (what the replay
        ratio counts)."""
        return self.sequence_length or 1

    @property
    def column_bytes(self) -> int:
        """Bytes one shard's columns take in the column backend."""
        rows = self.column_rows()
        return sum(rows[name] * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                   for name, (shape, dtype) in self.layout().items())

    @property
    def bytes_per_step(self) -> float:
        """Bytes per env step it holds: a transition's row, or a step's row and its share of the
        sequence states."""
        return self.column_bytes / (self.column_rows()["action"] if self.sequence_length else self.rows)

    def layout(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Each column's shape per row and dtype."""
        if self.frame_stack:
            return frame_layout(tuple(self.obs_shape[1:]), self.action_dim, self.obs_parts)
        if self.sequence_length:
            return sequence_layout(self.obs_shape, self.obs_dtype, self.action_dim, self.state_size, self.obs_parts)
        return transition_layout(self.obs_shape, self.obs_dtype, self.action_dim)


def build_storage(spec: StorageSpec, backend: ColumnBackend | None = None, columns: dict | None = None,
                  bookkeeping: dict | None = None) -> RingStorage | FrameStorage | SequenceStorage:
    """The storage a spec describes, on `columns` (its rows of a larger allocation) or its own;
    a frame storage also on `bookkeeping` (its envs' rows of a replay's) when given."""
    if spec.sequence_length:
        return SequenceStorage(spec.capacity, spec.num_envs, spec.sequence_length, spec.sequence_overlap,
                               tuple(spec.obs_shape), spec.obs_dtype, spec.state_size, backend, spec.action_dim,
                               columns, spec.obs_parts)
    if spec.frame_stack:
        return FrameStorage(spec.capacity, spec.num_envs, tuple(spec.obs_shape[1:]), spec.frame_stack,
                            backend, columns, bookkeeping, spec.action_dim, spec.obs_parts)
    return RingStorage(spec.capacity, spec.layout(), backend, columns)


class ReplayShard:
    """One collector's storage, counters and (prioritized replay) priorities."""

    def __init__(self, shard_id: int, storage: RingStorage | FrameStorage, priorities: PrioritySettings | None = None,
                 shared: tuple | None = None):
        """`shared`: (tree, offset, stamps) when the replay keeps one sum tree for all its shards."""
        self.shard_id = shard_id
        self.storage = storage
        self.priorities = (PriorityIndex(storage.capacity, priorities, *(shared or ()))
                           if priorities is not None else None)
        self.sampled = 0
        self.weight_min = float("inf")  # the smallest importance weight served since stats() last read it
        self.writer_env_steps = 0  # its collector's env steps up to the newest chunk stored here
        self.writer_attachments = 0  # collector processes that started writing (2+: one was restarted)
        # Set in a learner process Ray restarted: its collectors count on from env steps whose
        # data died with the last process (or was never restored), and stats() says how many.
        self.counts_lost_writes = False

    def attach_writer(self) -> int:
        """A collector process starts writing here. Returns the env steps its predecessors' stored
        chunks covered: a restarted collector counts on from there, so env steps never go back
        and count only steps whose data reached replay."""
        self.writer_attachments += 1
        return self.writer_env_steps

    def add(self, chunk: Chunk | FrameChunk, writer_env_steps: int | None = None) -> None:
        """Store a whole chunk (which brings its collector's env steps up to `writer_env_steps`)."""
        first_stamp = self.storage.total_added
        placed = self.storage.add(chunk)
        if self.priorities is not None:
            self.priorities.place(placed, first_stamp, chunk.get("priority"))
        if writer_env_steps is not None:
            self.writer_env_steps = max(self.writer_env_steps, writer_env_steps)

    def writer_left(self, env_steps: int) -> None:
        """Its collector left (its node gone) having counted `env_steps`: what this shard does not
        hold of them went with the node, and the next collector to write here counts on from there."""
        self.writer_env_steps = max(self.writer_env_steps, env_steps)
        self.counts_lost_writes = True

    @property
    def lost_writes(self) -> int:
        """Transitions its collectors sent that this shard's counts do not hold: those a dead learner
        process took with it (stored after its checkpoint, or all of them when none was restored)
        and those in flight when it died. Known once the first chunk of this process arrived; 0
        where no process died. Its writer's env steps are always `inserted + lost_writes`."""
        if not self.counts_lost_writes or self.writer_env_steps == 0:
            return 0
        return max(0, self.writer_env_steps - self.inserted)

    @property
    def size(self) -> int:
        """Transitions that can be sampled now."""
        return self.storage.size

    @property
    def steps_held(self) -> int:
        """Env steps held now: its transitions, or the steps its sequences are read from."""
        return self.storage.steps_held if isinstance(self.storage, SequenceStorage) else self.storage.size

    @property
    def inserted(self) -> int:
        """Transitions its collectors inserted (restored ones included)."""
        return self.storage.total_added

    def stats(self) -> ShardStats:
        """Counters and memory figures, for the driver's metrics."""
        storage, priorities = self.storage, None
        if self.priorities is not None:
            index = self.priorities
            priorities = PriorityStats(index.total, index.max_mass, index.updates_applied, index.updates_dropped,
                                       self.weight_min)
            self.weight_min = float("inf")  # a minimum since the last read
        capacity = storage.step_capacity if isinstance(storage, SequenceStorage) else storage.capacity
        return ShardStats(self.shard_id, self.steps_held, storage.total_added, self.sampled, capacity,
                          storage.nbytes, self.writer_env_steps, self.writer_attachments, self.lost_writes, priorities)

    def get_state(self) -> dict:
        """Storage, counters and priorities, for a replay checkpoint; `pause_s` is how long this
        took (inserts and samples wait meanwhile)."""
        start = time.perf_counter()
        state = {"storage": self.storage.get_state(), "sampled": self.sampled}
        if self.priorities is not None:
            state["priorities"] = self.priorities.get_state()
        state["pause_s"] = time.perf_counter() - start
        return state

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output (what was stored since is replaced). Replay saved
        without priorities comes back with every transition at the largest mass."""
        self.storage.set_state(state["storage"])
        self.sampled = state["sampled"]
        if self.priorities is not None:
            if "priorities" in state:
                self.priorities.set_state(state["priorities"])
            else:
                self.priorities.reset_to_max(self.storage.sampleable_rows(), self.storage.total_added)
