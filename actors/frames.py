"""The collector side of pixel observations: frame stacking and frame-once chunks.

A pixel env yields one grayscale frame per env step; the Q-network sees the last `stack` frames.
`FrameStacker` builds those stacks for acting (and evaluation). `FrameChunker` is what a collector
sends to replay instead of whole stacks: every frame once, numbered in its env's *stream* (frame
i+1 is the frame the env step after frame i produced, across episode boundaries), plus n-step
transitions whose obs and next_obs are stream numbers. The shard rebuilds the stacks from the
numbers (replay/frames.py) with the same rule the stacker uses:

    stack(i) = frames[i - min(k, step(i))] for k = stack-1 .. 0

where step(i) counts the frames since the episode's first frame (a new episode's first frame is
repeated into the slots before it, so a stack never mixes two episodes). Plain numpy, no Ray.
"""

from __future__ import annotations

import numpy as np

from actors.nstep import NStepFolder


class FrameStacker:
    """The last `stack` frames of every env of a vector env, oldest first: [E, stack, H, W]."""

    def __init__(self, num_envs: int, stack: int, frame_shape: tuple[int, ...]):
        if stack < 1:
            raise ValueError(f"stack must be >= 1, got {stack}")
        self.stacks = np.zeros((num_envs, stack, *frame_shape), np.uint8)

    def reset(self, frames: np.ndarray) -> np.ndarray:
        """Every env starts an episode with `frames` [E, H, W]; returns a copy of the stacks."""
        self.stacks[:] = frames[:, None]
        return self.stacks.copy()

    def push(self, frames: np.ndarray, episode_start: np.ndarray) -> np.ndarray:
        """Append the newest frames [E, H, W]; envs where `episode_start` is set start afresh
        (the frame fills their whole stack). Returns a copy of the stacks."""
        self.stacks[:, :-1] = self.stacks[:, 1:]
        self.stacks[:, -1] = frames
        if episode_start.any():
            self.stacks[episode_start] = frames[episode_start][:, None]
        return self.stacks.copy()


class FrameChunker:
    """Numbers each env's frames and folds n-step transitions that refer to frames by number.

    `start` takes the stacks the env reset with; `add_step` one vector-env step; `pop` returns the
    frames buffered since the last pop and the transitions completed since then (a FrameChunk).
    All envs of a vector env step together, so one counter numbers every env's stream.

    `terminated` ends the n-step window without bootstrapping; `episode_end` marks where the env
    really starts a new episode (NEXT_STEP autoreset: the next step is a reset step). They differ
    only with terminal-on-life-loss, where a lost life is terminal for learning but the game, and
    its frame stack, go on.
    """

    def __init__(self, n: int, gamma: float, num_envs: int, frame_shape: tuple[int, ...], chunk_steps: int):
        self.num_envs = num_envs
        self.folder = NStepFolder(n, gamma, num_envs, (), np.int64, chunk_steps, with_env=True)
        self.frames = np.zeros((chunk_steps + 1, num_envs, *frame_shape), np.uint8)
        self.frame_step = np.zeros((chunk_steps + 1, num_envs), np.int32)
        self.buffered = 0  # frames held since the last pop
        self.first_index = 0  # stream number of frames[0]
        self.index = 0  # stream number of the frames the env shows now
        self.step = np.zeros(num_envs, np.int32)  # frames since episode start, of the current frames
        self.episode_ended = np.zeros(num_envs, bool)  # the next env step is a reset step

    def _buffer(self, frames: np.ndarray, steps: np.ndarray) -> None:
        if self.buffered == len(self.frames):  # more steps than chunk_steps between pops: grow
            self.frames = np.concatenate([self.frames, np.zeros_like(self.frames)])
            self.frame_step = np.concatenate([self.frame_step, np.zeros_like(self.frame_step)])
        self.frames[self.buffered] = frames
        self.frame_step[self.buffered] = steps
        self.buffered += 1

    def start(self, stacks: np.ndarray) -> None:
        """The first frames of the stream: the newest frame of each reset stack [E, stack, H, W]."""
        self.step[:] = 0
        self._buffer(stacks[:, -1], self.step)

    def add_step(self, action: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                 next_stacks: np.ndarray, episode_end: np.ndarray) -> None:
        """One vector-env step: the transition from frame `index` to `index + 1` of every env."""
        numbers = np.full(self.num_envs, self.index, np.int64)
        self.folder.add_step(numbers, action, reward, terminated, truncated, numbers + 1)
        self.step = np.where(self.episode_ended, 0, self.step + 1).astype(np.int32)
        self.episode_ended = episode_end & ~self.episode_ended  # a reset step's flags mean nothing
        self.index += 1
        self._buffer(next_stacks[:, -1], self.step)

    def pop(self) -> dict[str, np.ndarray | int]:
        """The buffered frames and the transitions complete now, as one FrameChunk."""
        transitions = self.folder.pop()
        count = self.buffered
        chunk = {
            "frames": self.frames[:count].copy(),
            "frame_step": self.frame_step[:count].copy(),
            "first_index": self.first_index,
            **transitions,
        }
        self.first_index += count
        self.buffered = 0
        return chunk
