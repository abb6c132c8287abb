"""Images that already carry channels (rank-3 observations, MinAtar's 10x10xC booleans): which
axis holds the channels, and the vector env that hands them on channels-first in raypex's dtypes.
actors/envs.py decides when an env's observations are such images."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np


@dataclass(frozen=True)
class ImageLayout:
    """How a rank-3 image observation becomes what raypex stores and trains on: channels first
    ([C, H, W]), as uint8 (bool -> 0/255, so networks scale every uint8 input by 1/255) or float32."""

    channels_last: bool
    shape: tuple[int, int, int]  # [C, H, W]
    dtype: str  # "uint8" or "float32"
    from_bool: bool

    def convert(self, obs: np.ndarray) -> np.ndarray:
        """[E, *env shape] observations -> [E, C, H, W] in `dtype` (a copy, contiguous)."""
        obs = np.asarray(obs)
        if self.channels_last:
            obs = np.moveaxis(obs, -1, 1)
        if self.from_bool:
            return np.ascontiguousarray(obs, dtype=np.uint8) * np.uint8(255)
        return np.ascontiguousarray(obs, dtype=self.dtype)


def image_layout(shape: tuple[int, ...], dtype) -> ImageLayout | None:
    """The layout of a rank-3 image observation, or None when `shape` is not rank 3.

    The channel axis is the first one when it is strictly the smallest, else the last (HWC,
    Gymnasium's image convention: MinAtar's 10x10x4, and also its 10x10x10 Seaquest). bool and
    unsigned 8-bit stay 8-bit; every other dtype becomes float32 (used as it is, not scaled).
    """
    if len(shape) != 3:
        return None
    channels_first = shape[0] < min(shape[1], shape[2])
    c, h, w = shape if channels_first else (shape[2], shape[0], shape[1])
    kind = np.dtype(dtype)
    from_bool = kind == np.bool_
    stored = "uint8" if from_bool or kind == np.uint8 else "float32"
    return ImageLayout(not channels_first, (c, h, w), stored, from_bool)


class ImageVectorEnv:
    """A vector env of rank-3 images seen channels-first in raypex's dtypes (`ImageLayout`)."""

    def __init__(self, env, layout: ImageLayout):
        self.env = env
        self.layout = layout
        self.num_envs = env.num_envs
        self.single_action_space = env.single_action_space
        low, high = (0, 255) if layout.dtype == "uint8" else (-np.inf, np.inf)
        self.single_observation_space = gym.spaces.Box(low, high, layout.shape, np.dtype(layout.dtype))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset every env; observations converted."""
        obs, info = self.env.reset(seed=seed, options=options)
        return self.layout.convert(obs), info

    def step(self, actions: np.ndarray):
        """Step every env; observations converted, everything else as the inner env returns it."""
        obs, reward, terminated, truncated, info = self.env.step(actions)
        return self.layout.convert(obs), reward, terminated, truncated, info

    def close(self) -> None:
        """Close the inner env."""
        self.env.close()
