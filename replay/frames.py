"""Frame-once replay storage for stacked pixel observations.

A stored transition costs one frame plus a few scalars: each env's frames live in their own ring
(one slot per frame of the env's stream, see actors/frames.py), and the transition that starts at a
frame is kept in that frame's slot as (action, return, discount, offset to its next_obs frame).
Stacks of obs and next_obs are rebuilt at sample time with one gather each, never across an
episode boundary (the episode's first frame is repeated instead) and never across the ring's
write position (a transition whose oldest frame has been overwritten is no longer valid).

What the learner is sent carries each frame once too (`sample_batches`): a transition's obs stack
and its next_obs stack (n frames later) share stack - n frames, so it travels as stack + min(n,
stack) frames plus indices that rebuild both stacks on the learner's device, instead of 2 x stack
frames.

Sampling is uniform over the valid slots without rejection: the valid slot list is rebuilt (one
`flatnonzero`) after each add and reused by every sample until the next add. Slots are invalid
when they hold a frame no transition starts from (an episode's last frame), a transition not yet
folded (the newest n-1 frames) or a stack whose oldest frames were overwritten (at most
stack-1 slots per env): a fraction of a percent of an Atari-sized ring.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from replay.priorities import Placement

# The per-slot arrays besides the frame: name -> dtype. One table sizes, allocates, measures and
# checkpoints them, so the byte count cannot drift from what is allocated.
_SLOT_SCALARS = {
    "frame_step": np.int32,  # frames since its episode's first frame
    "stream": np.int64,  # stream number of the frame in the slot (-1: empty)
    "action": np.int64,
    "ret": np.float32,
    "discount": np.float32,
    "next_offset": np.int16,  # next_obs frame = this frame + offset
    "valid": np.bool_,
}
_ARRAYS = ("frames", *_SLOT_SCALARS)


def frames_per_sample(stack: int, n_step: int) -> int:
    """The most distinct frames one transition's obs and next_obs stacks hold between them: the
    obs stack plus the next_obs frames past it (next_obs is at most n_step frames later)."""
    return stack + min(max(n_step, 0), stack)


def frame_bytes_per_slot(frame_shape: tuple[int, ...]) -> int:
    """Bytes one slot costs: the frame, its step counter, stream number and the transition."""
    return int(np.prod(frame_shape)) + sum(np.dtype(dtype).itemsize for dtype in _SLOT_SCALARS.values())


class FrameStorage:
    """Per-env frame rings holding each frame once, with vectorized add and uniform sampling.

    `add` takes a FrameChunk (actors/frames.py): frames [F, E, H, W] with their episode step
    counters and the stream number of frames[0], plus transitions (env, obs, action, return,
    discount, next_obs) whose obs and next_obs are stream numbers. `gather` returns whole stacks
    like RingStorage does, so the shard and the learner do not care which storage they have.
    """

    def __init__(self, capacity: int, num_envs: int, frame_shape: tuple[int, ...], stack: int,
                 n_step: int | None = None):
        if capacity < 1 or num_envs < 1 or stack < 1:
            raise ValueError(f"need capacity, num_envs, stack >= 1, got {capacity}, {num_envs}, {stack}")
        E = num_envs
        K = max(math.ceil(capacity / E), stack + 1)  # slots per env
        self.num_envs, self.slots, self.stack = E, K, stack
        # Frames per transition in a learner batch; without n_step known, the worst case.
        self.frames_per_sample = frames_per_sample(stack, stack if n_step is None else n_step)
        self.capacity = E * K
        self.frames = np.zeros((E, K, *frame_shape), np.uint8)
        for name, dtype in _SLOT_SCALARS.items():
            setattr(self, name, np.zeros((E, K), dtype))
        self.stream.fill(-1)
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
        """Bytes held by the preallocated arrays."""
        return sum(getattr(self, name).nbytes for name in _ARRAYS)

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
        frames = np.asarray(chunk["frames"])
        first = int(chunk["first_index"]) + self.renumber
        if first != self.written:
            self.renumber += self.written - first
            first = self.written
        cleared = self._write_frames(first, frames, np.asarray(chunk["frame_step"]))
        rows, kept = self._write_transitions(chunk)
        self._valid_rows = None
        return Placement(rows, kept, cleared)

    def _write_frames(self, first: int, frames: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Write the frames; returns the flat slots whose transition is gone."""
        count = len(frames)
        skip = max(0, count - self.slots)  # a chunk longer than the ring keeps its newest frames
        numbers = first + np.arange(skip, count)
        slots = numbers % self.slots
        self.frames[:, slots] = frames[skip:].swapaxes(0, 1)
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
        self.action[env, slot] = np.asarray(chunk["action"])[stored]
        self.ret[env, slot] = np.asarray(chunk["return"])[stored]
        self.discount[env, slot] = np.asarray(chunk["discount"])[stored]
        self.next_offset[env, slot] = np.asarray(chunk["next_obs"], np.int64)[stored] + self.renumber - start
        self.valid[env, slot] = True
        return env * self.slots + slot, np.flatnonzero(stored)

    def sampleable_rows(self) -> np.ndarray:
        """The flat slots holding a transition that can be sampled now."""
        return self._rows()

    def sample_rows(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """`count` flat slot indices (env * slots + slot) drawn uniformly from the valid ones."""
        rows = self._rows()
        if len(rows) == 0:
            raise ValueError("cannot sample from an empty storage")
        return rows[rng.integers(0, len(rows), size=count)]

    def _stack_slots(self, env: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """[N, stack] slots of the stacks ending at `slot`, oldest first (the episode's first
        frame repeated where the stack would reach before it)."""
        back = np.arange(self.stack - 1, -1, -1)
        steps = self.frame_step[env, slot]
        return (slot[:, None] - np.minimum(back[None, :], steps[:, None])) % self.slots

    def gather(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions at `rows` with whole stacks: obs and next_obs are [N, stack, H, W] uint8."""
        env, slot = np.divmod(rows, self.slots)
        next_slot = (slot + self.next_offset[env, slot]) % self.slots
        return {
            "obs": self.frames[env[:, None], self._stack_slots(env, slot)],
            "action": self.action[env, slot],
            "return": self.ret[env, slot],
            "discount": self.discount[env, slot],
            "next_obs": self.frames[env[:, None], self._stack_slots(env, next_slot)],
        }

    def sample_batches(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Micro-batches for the learner from `rows` [G, B], frames once (a FrameBatch, see
        replay/contracts.py): F = frames_per_sample frames per transition, its obs stack and the
        newest F - stack frames of its next_obs stack, as frames [G, B * F, H, W]; obs_index and
        next_index [G, B, stack] say which rows make each stack. The older next_obs frames are
        obs frames: next_obs starts `next_offset` frames later and both stacks repeat the same
        episode-start frame, so position j of next_obs is position j + offset of obs."""
        groups, count = rows.shape
        stack, per_sample = self.stack, self.frames_per_sample
        tail = per_sample - stack  # next_obs frames sent
        env, slot = np.divmod(rows.reshape(-1), self.slots)
        offset = self.next_offset[env, slot].astype(np.int64)
        if tail < stack and (offset > tail).any():  # (with tail = stack every next_obs frame is sent)
            raise ValueError(f"a next_obs {int(offset.max())} frames after its obs; this storage sends "
                             f"{tail} (frames_per_sample {per_sample}): built with too small an n_step")
        next_slots = self._stack_slots(env, (slot + offset) % self.slots)[:, stack - tail:]
        slots = np.concatenate([self._stack_slots(env, slot), next_slots], axis=1)  # [G * B, F]
        frames = self.frames[env[:, None], slots].reshape(groups, count * per_sample, *self.frames.shape[2:])
        first = (np.arange(count) * per_sample)[:, None]  # each transition's first row
        position = np.arange(stack)
        obs_index = np.broadcast_to(first + position, (groups, count, stack))
        next_index = np.where(position >= stack - tail, first + position + tail,
                              first + position + offset.reshape(groups, count, 1))
        env, slot = env.reshape(groups, count), slot.reshape(groups, count)
        return {
            "frames": frames,
            "obs_index": np.ascontiguousarray(obs_index),
            "action": self.action[env, slot],
            "return": self.ret[env, slot],
            "discount": self.discount[env, slot],
            "next_index": next_index,
        }

    def keys(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(env, stream number of the obs frame) of `rows`, in the collector's numbering."""
        env, slot = np.divmod(rows, self.slots)
        return env, self.stream[env, slot] - self.renumber

    def get_state(self) -> dict:
        """Every array and counter, for a replay checkpoint."""
        state = {name: getattr(self, name).copy() for name in _ARRAYS}
        state.update(written=self.written, renumber=self.renumber, total_added=self.total_added)
        return state

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output (same capacity, envs and frame shape)."""
        for name in _ARRAYS:
            getattr(self, name)[...] = state[name]
        self.written, self.renumber, self.total_added = state["written"], state["renumber"], state["total_added"]
        self._valid_rows = None
