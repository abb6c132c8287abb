"""SequenceAdder: what a recurrent (r2d2) collector sends its shard: every step of every env, and
the recurrent state at each sequence's first step (replay/sequences.py stores them).

A step is stored as it was acted: the observation (each part apart, for observations in parts:
replay/contracts.py), the action, the training reward, the discount
(gamma; 0 where the episode ended, by termination or a time limit, so no return crosses into the
next episode) and `first` (the observation is an episode's first: the learner starts the state
again there). Every env of a collector steps together, so one stream number counts every env's
steps; a sequence starts at every multiple of `period`, and the state each env acted from at that
step goes with the chunk.

Gymnasium's NEXT_STEP autoreset: the step after an episode's end only resets the env. It is stored
too (the streams stay in step across envs), as a pad step with reward and discount 0 and `real`
false, so it is no env step, and the step after it is the new episode's first.
"""

from __future__ import annotations

import numpy as np

from raypex.actors.adders import EnvStep, Learning
from raypex.replay.contracts import fields


class SequenceAdder:
    """Buffers a chunk's steps and sequence-start states (see the module docstring)."""

    def __init__(self, num_envs: int, gamma: float, period: int, clip_rewards: bool = False,
                 life_loss: bool = False, lives: np.ndarray | None = None):
        self.gamma, self.period = gamma, period
        self.learning = Learning(clip_rewards, life_loss, lives)
        self.first = np.ones(num_envs, bool)  # the next step's observation is an episode's first
        self.next_is_reset = np.zeros(num_envs, bool)  # the next step is an autoreset's pad step
        self.index = 0  # stream number of the next step
        self.first_index = 0  # stream number of the buffer's first step
        self.steps: list[dict[str, np.ndarray]] = []
        self.states: list[np.ndarray] = []

    def add(self, step: EnvStep) -> np.ndarray:
        """Take one step, acted from `step.state` (each env's state before it); returns which envs
        took a real step."""
        real = ~self.next_is_reset
        if self.index % self.period == 0:
            self.states.append(np.array(step.state, np.float32))
        ended = self.learning.terminal(step, real) | step.truncated
        self.steps.append({
            **{name: np.array(part) for name, part in fields("obs", step.obs).items()}, "action": np.array(step.action),
            "reward": np.where(real, self.learning.reward(step), 0.0).astype(np.float32),
            "discount": np.where(real & ~ended, self.gamma, 0.0).astype(np.float32),
            "first": self.first.copy(), "real": real})
        self.first = self.next_is_reset.copy()  # the step after a pad step starts an episode
        self.next_is_reset = real & (step.terminated | step.truncated)
        self.index += 1
        return real

    def pop(self) -> dict | None:
        """The buffered steps as one chunk ([F, E, ...] each, `state` [S, E, state_size]), or None."""
        if not self.steps:
            return None
        chunk = {name: np.stack([s[name] for s in self.steps]) for name in self.steps[0]}
        chunk["state"] = np.stack(self.states) if self.states else np.zeros((0, *self.first.shape, 0), np.float32)
        chunk["first_index"] = self.first_index
        self.first_index = self.index
        self.steps, self.states = [], []
        return chunk

    def set_next_value(self, value: np.ndarray) -> None:
        """Unused: sequences get their first priority from the replay (the largest seen)."""
