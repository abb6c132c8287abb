"""Dict and Tuple observations: each part of the space checked and converted, the way a whole
observation of that kind is (actors/envs.py), and the conversion the vector env hands them on by.

A part may be a flat vector (float32), a symbol (Discrete or MultiDiscrete, one-hot: actors/one_hot.py),
a 2-D uint8 frame (one channel, [1, H, W]) or a rank-3 image (channels-first, actors/images.py). A
Tuple's parts are keyed "0", "1", ... (replay/contracts.py says how parts travel). Nested
spaces are refused, as is an image too small for raypex's CNNs: one line each, before any actor
starts. Frames in a part are not stacked: a part is what the env shows now.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from raypex.actors.env_ids import UnsupportedEnv
from raypex.actors.images import ImageLayout, image_layout, stored_space
from raypex.actors.one_hot import OneHot, one_hot_for

MIN_IMAGE_SIDE = 3  # learner/networks.py SMALL_CNN_MIN_SIDE (the driver checks envs without torch)


@dataclass(frozen=True)
class ObservationPart:
    """One part as raypex stores and trains on it, and how the env's values become that."""

    key: str
    shape: tuple[int, ...]
    dtype: str  # "uint8" (pixels, scaled by 1/255 in the networks) or "float32"
    source: str  # the env's key: a Dict's own key, a Tuple's position
    conversion: OneHot | ImageLayout | None = None  # one-hot, an image's, or a cast and reshape (None)

    @property
    def layout(self) -> tuple[str, tuple[int, ...], str]:
        """(key, shape, dtype): what EnvSpec and the settings carry of it."""
        return self.key, self.shape, self.dtype

    def convert(self, values: np.ndarray) -> np.ndarray:
        """[E, *env shape] -> [E, *shape] in `dtype`."""
        if isinstance(self.conversion, OneHot):
            return self.conversion(values)
        if isinstance(self.conversion, ImageLayout):
            return self.conversion.convert(values)
        return np.ascontiguousarray(np.asarray(values, self.dtype).reshape(len(values), *self.shape))

    @property
    def space(self) -> gym.spaces.Box:
        """The space of one converted part."""
        if isinstance(self.conversion, OneHot):
            return self.conversion.encoded_space
        return stored_space(self.shape, self.dtype)


def _part(key: str, source: str, space: gym.spaces.Space, env_id: str) -> ObservationPart:
    where = f"env.id '{env_id}': observation part {key!r}"
    encode = one_hot_for(space)
    if encode is not None:
        return ObservationPart(key, (encode.size,), "float32", source, encode)
    if not isinstance(space, gym.spaces.Box):
        raise UnsupportedEnv(f"{where} is a {type(space).__name__} space ({space}); a part may be a Box, Discrete or "
                             "MultiDiscrete space (Dict and Tuple spaces do not nest)")
    shape = tuple(space.shape)
    if len(shape) == 2 and np.dtype(space.dtype) == np.uint8:
        shape = (1, *shape)
    layout = image_layout(shape, space.dtype) if len(space.shape) == 3 else None
    if len(shape) == 3:
        image_shape = layout.shape if layout is not None else shape
        if min(image_shape[1:]) < MIN_IMAGE_SIDE:
            raise UnsupportedEnv(f"{where} has images of {image_shape[1]}x{image_shape[2]}; raypex's CNNs need at "
                                 f"least {MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE}")
        if layout is not None:
            return ObservationPart(key, layout.shape, layout.dtype, source, layout)
        return ObservationPart(key, shape, "uint8", source)
    if len(shape) > 1:
        raise UnsupportedEnv(f"{where} has shape {shape} ({space.dtype}); a part may be a flat vector, a 2-D uint8 "
                             "frame or a rank-3 image")
    return ObservationPart(key, (int(np.prod(shape)),), "float32", source)


def observation_parts(space: gym.spaces.Space, env_id: str) -> tuple[ObservationPart, ...] | None:
    """The parts of a Dict or Tuple observation space, in the space's order; None for any other
    space. UnsupportedEnv (one line) for a part raypex cannot learn on."""
    if isinstance(space, gym.spaces.Dict):
        items = [(str(key), str(key), part) for key, part in space.spaces.items()]
    elif isinstance(space, gym.spaces.Tuple):
        items = [(str(i), str(i), part) for i, part in enumerate(space.spaces)]
    else:
        return None
    if not items:
        raise UnsupportedEnv(f"env.id '{env_id}' has an empty {type(space).__name__} observation space")
    return tuple(_part(key, source, part, env_id) for key, source, part in items)


@dataclass(frozen=True)
class PartsConversion:
    """A vector env's Dict or Tuple observations -> {key: [E, *part shape]} (`ObservationPart`)."""

    parts: tuple[ObservationPart, ...]

    def __call__(self, obs) -> dict[str, np.ndarray]:
        if isinstance(obs, tuple):
            return {part.key: part.convert(obs[int(part.source)]) for part in self.parts}
        return {part.key: part.convert(obs[part.source]) for part in self.parts}

    @property
    def space(self) -> gym.spaces.Dict:
        """The space of one converted observation."""
        return gym.spaces.Dict({part.key: part.space for part in self.parts})
