"""Frame-once replay storage for stacked pixel observations.

A stored transition costs one frame plus a few scalars: each env's frames live in their own ring
(one slot per frame of the env's stream, see actors/frames.py), and the transition that starts at a
frame is kept in that frame's slot as (action, return, discount, offset to its next_obs frame).
Stacks of obs and next_obs are rebuilt at sample time with one gather each, never across an
episode boundary (the episode's first frame is repeated instead) and never across the ring's
write position (a transition whose oldest frame has been overwritten is no longer valid).

The bytes (frames, actions, returns, discounts) are columns of a column backend
(replay/columns.py): numpy on the host, or tensors on the learner's GPU, flat over env x slot
(row = env * slots + slot). The bookkeeping that decides what may be sampled and which frames
make a stack (frame step counters, stream numbers, next_obs offsets, validity) stays in numpy on
the host. A sample is an index draw (`index`): each transition's row and the rows of the frames of
its obs and next_obs stacks, which the learner gathers where the frames are (GATHER).

Sampling is uniform over the valid slots without rejection: the valid slot list is rebuilt (one
`flatnonzero`) after each add and reused by every sample until the next add. Slots are invalid
when they hold a frame no transition starts from (an episode's last frame), a transition not yet
folded (the newest n-1 frames) or a stack whose oldest frames were overwritten (at most
stack-1 slots per env): a fraction of a percent of an Atari-sized ring.

Observations in parts (Dict and Tuple spaces, replay/contracts.py) are stored the same way with
a stack of one: each step's parts once, one column per part (`frames.<key>`), so a transition
costs one observation and its next_obs is the slot its offset names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from raypex.replay.columns import ColumnBackend, HostColumns
from raypex.replay.contracts import SEPARATOR, Parts
from raypex.replay.priorities import Placement
from raypex.replay.ring import action_layout

# The host bookkeeping per slot: name -> dtype.
_SLOT_BOOKKEEPING = {
    "frame_step": np.int32,  # frames since its episode's first frame
    "stream": np.int64,  # stream number of the frame in the slot (-1: empty)
    "next_offset": np.int16,  # next_obs frame = this frame + offset
    "valid": np.bool_,
}


def frame_columns(frame_shape: tuple[int, ...], parts: Parts = ()) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The columns a slot's observation is stored in: one uint8 `frames` column of a pixel
    frame's shape, or a `frames.<key>` column per part."""
    if parts:
        return {f"frames{SEPARATOR}{key}": (tuple(shape), np.dtype(dtype)) for key, shape, dtype in parts}
    return {"frames": (tuple(frame_shape), np.dtype(np.uint8))}


def frame_layout(frame_shape: tuple[int, ...], action_dim: int = 0,
                 parts: Parts = ()) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The columns of a frame storage (per row: one slot of one env), in the column backend; the
    action is an int64 index, or `action_dim` float32s (td3, sac)."""
    return {**frame_columns(frame_shape, parts), "action": action_layout(action_dim),
            "return": ((), np.dtype(np.float32)), "discount": ((), np.dtype(np.float32))}


def frame_gather(parts: Parts = ()) -> dict[str, tuple[str, str]]:
    """Training field -> (column, index key of `stack_index`): how the learner gathers a batch.
    A part is gathered by the newest frame's row alone (its stack is one)."""
    if parts:
        observations = {f"{field}{SEPARATOR}{key}": (f"frames{SEPARATOR}{key}", index)
                        for key, _, _ in parts for field, index in (("obs", "obs_frame"), ("next_obs", "next_frame"))}
    else:
        observations = {"obs": ("frames", "obs_frames"), "next_obs": ("frames", "next_frames")}
    return {**observations, "action": ("action", "row"), "return": ("return", "row"), "discount": ("discount", "row")}


def frame_slots(capacity: int, num_envs: int, stack: int) -> int:
    """The rows a frame storage of `capacity` transitions has: `num_envs` rings of equal length,
    each at least one frame longer than a stack."""
    return num_envs * max(math.ceil(capacity / num_envs), stack + 1)


def frame_bookkeeping(num_envs: int, slots: int) -> dict[str, np.ndarray]:
    """The host bookkeeping of `num_envs` env rings of `slots` frames (a replay allocates it for
    every shard's envs at once, so that a draw across shards is indexed in one pass)."""
    arrays = {name: np.zeros((num_envs, slots), dtype) for name, dtype in _SLOT_BOOKKEEPING.items()}
    arrays["stream"].fill(-1)
    return arrays


def stack_index(rows: np.ndarray, frame_step: np.ndarray, next_offset: np.ndarray, stack: int,
                parts: bool = False) -> dict[str, np.ndarray]:
    """What the learner gathers transitions at flat `rows` (env * slots + slot, any shape) by: the
    rows themselves and, [..., stack] oldest first, the rows of their obs and next_obs frames, the
    episode's first frame repeated where a stack would reach before it; with `parts` (observations
    in parts, a stack of one) the rows of the obs and next_obs frames alone, [...]. `frame_step`
    and `next_offset` are [envs, slots] (one storage's, or a whole replay's)."""
    slots = frame_step.shape[1]
    flat = rows.reshape(-1)
    env, slot = np.divmod(flat, slots)
    back = np.arange(stack - 1, -1, -1)[None, :]
    base = (env * slots)[:, None]
    next_slot = (slot + next_offset[env, slot]) % slots

    def stack_rows(end: np.ndarray) -> np.ndarray:
        steps = frame_step[env, end][:, None]
        return (base + (end[:, None] - np.minimum(back, steps)) % slots).reshape(*rows.shape, stack)

    if parts:
        return {"row": rows, "obs_frame": flat.reshape(rows.shape),
                "next_frame": (env * slots + next_slot).reshape(rows.shape)}
    return {"row": rows, "obs_frames": stack_rows(slot), "next_frames": stack_rows(next_slot)}


def frame_bytes_per_slot(frame_shape: tuple[int, ...], action_dim: int = 0, parts: Parts = ()) -> int:
    """Bytes one slot costs: its columns and its bookkeeping."""
    layout = frame_layout(frame_shape, action_dim, parts)
    columns = sum(int(np.prod(shape)) * dtype.itemsize for shape, dtype in layout.values())
    return columns + sum(np.dtype(dtype).itemsize for dtype in _SLOT_BOOKKEEPING.values())


class FrameStorage:
    """Per-env frame rings holding each frame once, with vectorized add and uniform sampling.

    `add` takes a FrameChunk (actors/frames.py): frames [F, E, H, W] with their episode step
    counters and the stream number of frames[0], plus transitions (env, obs, action, return,
    discount, next_obs) whose obs and next_obs are stream numbers. `gather` reads whole stacks
    like RingStorage does. `columns` are this storage's rows of a larger allocation
    (replay/sharded.py); without them it allocates its own.
    """

    def __init__(self, capacity: int, num_envs: int, frame_shape: tuple[int, ...], stack: int,
                 backend: ColumnBackend | None = None, columns: dict | None = None,
                 bookkeeping: dict[str, np.ndarray] | None = None, action_dim: int = 0, parts: Parts = ()):
        """`parts`: observations in parts (then `frame_shape` is () and `stack` 1)."""
        if capacity < 1 or num_envs < 1 or stack < 1:
            raise ValueError(f"need capacity, num_envs, stack >= 1, got {capacity}, {num_envs}, {stack}")
        E = num_envs
        self.capacity = frame_slots(capacity, E, stack)
        K = self.capacity // E  # slots per env
        self.num_envs, self.slots, self.stack = E, K, stack
        if parts and stack != 1:
            raise ValueError(f"observations in parts are stored with a stack of 1, got {stack}")
        self.parts = bool(parts)
        self.frame_columns = frame_columns(frame_shape, parts)  # column -> (one frame's shape, dtype)
        # training field -> (column, index key of `index`): how the learner gathers a batch
        self.GATHER = frame_gather(parts)
        self.backend = backend or HostColumns()
        self.columns = columns if columns is not None else {
            name: self.backend.allocate((self.capacity, *shape), dtype)
            for name, (shape, dtype) in frame_layout(frame_shape, action_dim, parts).items()}
        arrays = bookkeeping if bookkeeping is not None else frame_bookkeeping(E, K)
        for name in _SLOT_BOOKKEEPING:
            setattr(self, name, arrays[name])
        self.written = 0  # frames written per env stream (every env of a collector steps together)
        self.renumber = 0  # added to incoming stream numbers (see `add`)
        self.total_added = 0
        self._valid_rows: np.ndarray | None = None

    @property
    def size(self) -> int:
        """Transitions that can be sampled now."""
        return len(self._rows())

    @property
    def nbytes(self) -> int:
        """Bytes held by the preallocated columns and bookkeeping."""
        return (sum(self.backend.nbytes(column) for column in self.columns.values())
                + sum(getattr(self, name).nbytes for name in _SLOT_BOOKKEEPING))

    def _rows(self) -> np.ndarray:
        if self._valid_rows is None:
            self._valid_rows = np.flatnonzero(self.valid)
        return self._valid_rows

    def add(self, chunk: Mapping) -> Placement:
        """Write a FrameChunk's frames, then its transitions; returns where its transitions went
        and which slots lost theirs (prioritized replay moves their mass).

        A collector that Ray restarted numbers its stream from 0 again; its numbers are shifted to
        continue after the stored frames (its first frame starts an episode, so no stack reaches
        back into the old stream).
        """
        frames = {name: np.asarray(chunk[name]) for name in self.frame_columns}
        first = int(chunk["first_index"]) + self.renumber
        if first != self.written:
            self.renumber += self.written - first
            first = self.written
        cleared = self._write_frames(first, frames, np.asarray(chunk["frame_step"]))
        rows, kept = self._write_transitions(chunk)
        self._valid_rows = None
        return Placement(rows, kept, cleared)

    def _write_frames(self, first: int, frames: dict[str, np.ndarray], steps: np.ndarray) -> np.ndarray:
        """Write the frames (each frame column's [F, E, ...]); returns the flat slots whose transition is gone."""
        count = len(steps)
        skip = max(0, count - self.slots)  # a chunk longer than the ring keeps its newest frames
        numbers = first + np.arange(skip, count)
        slots = numbers % self.slots
        rows = (np.arange(self.num_envs)[:, None] * self.slots + slots[None, :]).ravel()
        for name, (shape, _) in self.frame_columns.items():
            self.backend.write(self.columns[name], (rows,),
                               np.ascontiguousarray(frames[name][skip:].swapaxes(0, 1)).reshape(len(rows), *shape))
        self.frame_step[:, slots] = steps[skip:].T
        self.stream[:, slots] = numbers
        envs = np.arange(self.num_envs)[:, None]
        cleared = [(envs * self.slots + slots[None, :]).ravel()]
        self.valid[:, slots] = False  # whatever transition the slot held is gone with its frame
        self.written = first + count
        # The oldest surviving frames may have lost the older frames their stacks need.
        oldest = self.written - self.slots
        for number in range(max(oldest, 0), min(oldest + self.stack - 1, self.written)):
            slot = number % self.slots
            reach = number - np.minimum(self.stack - 1, self.frame_step[:, slot])
            lost = self.valid[:, slot] & (reach < oldest)
            self.valid[:, slot] &= ~lost
            cleared.append(np.flatnonzero(lost) * self.slots + slot)
        return np.concatenate(cleared)

    def _write_transitions(self, chunk: Mapping) -> tuple[np.ndarray, np.ndarray]:
        """Store the chunk's transitions whose frames are held; returns (flat slots, which chunk
        transitions they are)."""
        env = np.asarray(chunk["env"], np.int64)
        self.total_added += len(env)
        if len(env) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        start = np.asarray(chunk["obs"], np.int64) + self.renumber
        slot = start % self.slots
        oldest = self.written - self.slots
        stored = (self.stream[env, slot] == start) & (
            start - np.minimum(self.stack - 1, self.frame_step[env, slot]) >= oldest)
        env, slot, start = env[stored], slot[stored], start[stored]
        rows = env * self.slots + slot
        for name in ("action", "return", "discount"):
            self.backend.write(self.columns[name], (rows,), np.asarray(chunk[name])[stored])
        self.next_offset[env, slot] = np.asarray(chunk["next_obs"], np.int64)[stored] + self.renumber - start
        self.valid[env, slot] = True
        return rows, np.flatnonzero(stored)

    def sampleable_rows(self) -> np.ndarray:
        """The flat slots holding a transition that can be sampled now."""
        return self._rows()

    def sample_rows(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """`count` flat slot indices (env * slots + slot) drawn uniformly from the valid ones."""
        rows = self._rows()
        if len(rows) == 0:
            raise ValueError("cannot sample from an empty storage")
        return rows[rng.integers(0, len(rows), size=count)]

    def index(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """What the learner gathers sampled `rows` (flat slots, any shape) by (stack_index)."""
        return stack_index(rows, self.frame_step, self.next_offset, self.stack, self.parts)

    def gather(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions at `rows` read to host memory, with whole stacks: obs and next_obs are
        [N, stack, H, W] uint8, or their parts' fields (tests, checks)."""
        index = self.index(rows)
        return {field: self.backend.read(self.columns[column], (index[key],))
                for field, (column, key) in self.GATHER.items()}

    def keys(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(env, stream number of the obs frame) of `rows`, in the collector's numbering."""
        env, slot = np.divmod(rows, self.slots)
        return env, self.stream[env, slot] - self.renumber

    def get_state(self) -> dict:
        """Every column, bookkeeping array and counter, for a replay checkpoint."""
        state = {name: self.backend.read(column, (slice(None),)) for name, column in self.columns.items()}
        state.update({name: getattr(self, name).copy() for name in _SLOT_BOOKKEEPING})
        state.update(written=self.written, renumber=self.renumber, total_added=self.total_added)
        return state

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output (same capacity, envs and frame shape)."""
        for name, column in self.columns.items():
            self.backend.write(column, (slice(None),), np.asarray(state[name]).reshape(self.capacity, *column.shape[1:]))
        for name in _SLOT_BOOKKEEPING:
            getattr(self, name)[...] = state[name]
        self.written, self.renumber, self.total_added = state["written"], state["renumber"], state["total_added"]
        self._valid_rows = None
