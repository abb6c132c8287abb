"""Observations that are symbols, seen as one-hot vectors: a Discrete observation of n values
becomes a float32 vector of n, with a 1 at the value; a MultiDiscrete one becomes its parts'
one-hot vectors side by side (POPGym's memory tasks observe both). The networks and replay see a
flat Box, as for any vector env.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class OneHot:
    """The encoding of one Discrete or MultiDiscrete space: `size` floats per observation."""

    def __init__(self, space: gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        if isinstance(space, gym.spaces.Discrete):
            self.counts, self.starts = np.array([int(space.n)]), np.array([int(space.start)])
        else:
            self.counts, self.starts = np.asarray(space.nvec).ravel(), np.asarray(space.start).ravel()
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        self.size = int(self.counts.sum())
        self.space = space
        self.encoded_space = gym.spaces.Box(0.0, 1.0, (self.size,), np.float32)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """[N] (Discrete) or [N, ...] (MultiDiscrete) values -> [N, size] float32 one-hot rows;
        ValueError naming the value when one lies outside the space."""
        values = np.asarray(obs).reshape(len(obs), -1) - self.starts
        outside = (values < 0) | (values >= self.counts)
        if outside.any():
            row, part = np.argwhere(outside)[0]
            raise ValueError(f"an observation of {int(values[row, part] + self.starts[part])}, outside its "
                             f"{self.space} observation space")
        encoded = np.zeros((len(values), self.size), np.float32)
        encoded[np.arange(len(values))[:, None], self.offsets + values] = 1.0
        return encoded


def one_hot_for(space: gym.spaces.Space) -> OneHot | None:
    """The encoding for a Discrete or MultiDiscrete observation space; None for any other."""
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return OneHot(space)
    return None
