"""Adders: what turns a collector's vector-env steps into what its shard stores.

A collector hands every step to its adder (`add`) and pushes whatever `pop` returns once per
chunk. The adder owns the episode bookkeeping that storing needs, once: which steps are Gymnasium's
NEXT_STEP autoreset steps (dropped; `add` returns the envs that took a real step, which the
collector's episode statistics use too), the training reward (clipped when asked), and lives
(with terminal-on-life-loss a lost life ends the n-step window without bootstrapping while the game,
its frame stack and the next, real step go on).

- TransitionAdder: whole n-step transitions with their observations (Chunk);
- FrameAdder: pixel frames once each, numbered in their env's stream, and n-step transitions that
  name their frames by number (FrameChunk; replay/frames.py rebuilds the stacks); an observation in
  parts (Dict and Tuple spaces, replay/contracts.py) goes the same way, each step's parts once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from raypex.actors.nstep import NStepFolder
from raypex.replay.contracts import Chunk, FrameChunk, fields


@dataclass
class EnvStep:
    """One vector-env step as the collector saw it (every array has leading dimension num_envs)."""

    obs: np.ndarray  # what the actions were chosen from (FrameAdder: the stacks)
    action: np.ndarray
    reward: np.ndarray  # the env's reward (episode returns are counted from it, unclipped)
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: np.ndarray
    lives: np.ndarray | None = None  # ALE's lives after the step (terminal-on-life-loss only)
    q_taken: np.ndarray | None = None  # Q(obs, action) as acted (prioritized replay's initial priorities)
    state: np.ndarray | None = None  # the recurrent state each env acted from (recurrent policies only)


class Adder(Protocol):
    """A collector's writer to replay (see the module docstring)."""

    def add(self, step: EnvStep) -> np.ndarray:
        """Take one step; returns which envs took a real step (not an autoreset step)."""

    def pop(self) -> Chunk | FrameChunk | None:
        """What to push now, or None when there is nothing."""

    def set_next_value(self, value: np.ndarray) -> None:
        """max_a Q(next_obs, a) of the newest step, per env (NStepFolder's with_priorities)."""


class Learning:
    """How a step counts for learning: the training reward and the steps that end an n-step
    window without bootstrapping (termination, and a lost life with terminal-on-life-loss)."""

    def __init__(self, clip_rewards: bool, life_loss: bool, lives: np.ndarray | None):
        self.clip_rewards = clip_rewards
        self.life_loss = life_loss
        self.lives = lives

    def reward(self, step: EnvStep) -> np.ndarray:
        return np.clip(step.reward, -1.0, 1.0) if self.clip_rewards else step.reward

    def terminal(self, step: EnvStep, real: np.ndarray) -> np.ndarray:
        if not self.life_loss:
            return step.terminated
        lives = np.asarray(step.lives)
        # Only on real steps: on the reset step after an episode the new game's lives go up.
        lost = (lives < self.lives) & real
        self.lives = lives
        return step.terminated | lost


class TransitionAdder:
    """n-step transitions with whole observations, for flat observation vectors."""

    def __init__(self, folder: NStepFolder, clip_rewards: bool = False, life_loss: bool = False,
                 lives: np.ndarray | None = None):
        self.folder = folder
        self.learning = Learning(clip_rewards, life_loss, lives)

    def add(self, step: EnvStep) -> np.ndarray:
        """Fold one step (see Adder)."""
        real = ~self.folder.next_is_reset
        return self.folder.add_step(step.obs, step.action, self.learning.reward(step), self.learning.terminal(step, real),
                                    step.truncated, step.next_obs, episode_end=step.terminated | step.truncated,
                                    q_taken=step.q_taken)

    def pop(self) -> Chunk | None:
        """The transitions completed since the last pop, or None when there are none."""
        chunk = self.folder.pop()
        return chunk if len(chunk["action"]) else None

    def set_next_value(self, value: np.ndarray) -> None:
        """See Adder."""
        self.folder.set_next_value(value)


def newest_frames(obs) -> dict[str, np.ndarray]:
    """What replay stores of what every env shows now, by column: the newest frame of each pixel
    stack [E, stack, H, W], or each part of observations in parts."""
    return fields("frames", obs) if isinstance(obs, dict) else {"frames": obs[:, -1]}


class FrameAdder:
    """Numbers each env's frames and folds n-step transitions that refer to frames by number.

    `first_stacks` are the observations the env reset with (pixel stacks, or parts); their newest
    frames are the streams' first.
    All envs of a vector env step together, so one counter numbers every env's stream: the
    transition of a step goes from frame `index` to `index + 1` of every env.
    """

    def __init__(self, n: int, gamma: float, num_envs: int, chunk_steps: int, first_stacks: np.ndarray | dict,
                 clip_rewards: bool = False, life_loss: bool = False, lives: np.ndarray | None = None,
                 with_priorities: bool = False, action_dim: int = 0):
        self.num_envs = num_envs
        self.folder = NStepFolder(n, gamma, num_envs, (), np.int64, chunk_steps, with_env=True,
                                  with_priorities=with_priorities, action_dim=action_dim)
        self.learning = Learning(clip_rewards, life_loss, lives)
        first = newest_frames(first_stacks)
        self.frames = {name: np.zeros((chunk_steps + 1, *frames.shape), frames.dtype) for name, frames in first.items()}
        self.frame_step = np.zeros((chunk_steps + 1, num_envs), np.int32)
        self.buffered = 0  # frames held since the last pop
        self.first_index = 0  # stream number of frames[0]
        self.index = 0  # stream number of the frames the env shows now
        self.step = np.zeros(num_envs, np.int32)  # frames since episode start, of the current frames
        self._buffer(first, self.step)

    def _buffer(self, frames: dict[str, np.ndarray], steps: np.ndarray) -> None:
        if self.buffered == len(self.frame_step):  # more steps than chunk_steps between pops: grow
            self.frames = {name: np.concatenate([buffer, np.zeros_like(buffer)]) for name, buffer in self.frames.items()}
            self.frame_step = np.concatenate([self.frame_step, np.zeros_like(self.frame_step)])
        for name, buffer in self.frames.items():
            buffer[self.buffered] = frames[name]
        self.frame_step[self.buffered] = steps
        self.buffered += 1

    def add(self, step: EnvStep) -> np.ndarray:
        """Number the step's new frames and fold its transition (see Adder)."""
        real = ~self.folder.next_is_reset
        numbers = np.full(self.num_envs, self.index, np.int64)
        self.folder.add_step(numbers, step.action, self.learning.reward(step), self.learning.terminal(step, real),
                             step.truncated, numbers + 1, episode_end=step.terminated | step.truncated,
                             q_taken=step.q_taken)
        # A reset step's frame is the new episode's first: it starts the count again.
        self.step = np.where(real, self.step + 1, 0).astype(np.int32)
        self.index += 1
        self._buffer(newest_frames(step.next_obs), self.step)
        return real

    def set_next_value(self, value: np.ndarray) -> None:
        """See Adder."""
        self.folder.set_next_value(value)

    def pop(self) -> FrameChunk:
        """The buffered frames and the transitions complete now, as one FrameChunk (frames must
        reach the shard even before any transition names them, so this is never None)."""
        transitions = self.folder.pop()
        count = self.buffered
        chunk = {
            **{name: buffer[:count].copy() for name, buffer in self.frames.items()},
            "frame_step": self.frame_step[:count].copy(),
            "first_index": self.first_index,
            **transitions,
        }
        self.first_index += count
        self.buffered = 0
        return chunk
