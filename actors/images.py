"""Images that already carry channels (rank-3 observations, MinAtar's 10x10xC booleans): which
axis holds the channels, and how they become channels-first in raypex's dtypes. actors/envs.py
decides when an env's observations are such images."""

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

    @property
    def space(self) -> gym.spaces.Box:
        """The space of one converted observation."""
        return stored_space(self.shape, self.dtype)


def stored_space(shape: tuple[int, ...], dtype: str) -> gym.spaces.Box:
    """The space of observations raypex stores as `dtype`: uint8 pixels in [0, 255], float32 unbounded."""
    low, high = (0, 255) if dtype == "uint8" else (-np.inf, np.inf)
    return gym.spaces.Box(low, high, shape, np.dtype(dtype))


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
