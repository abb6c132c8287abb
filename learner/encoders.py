"""A user's observation encoder (`network.encoder: package.module:Class`), the torso every
algorithm's heads sit on in its place of raypex's own (the MLP's input, the CNN).

The class is built as `Class(observation_space, **network.encoder_kwargs)`: `observation_space` a
gymnasium Box of what the network sees (float32; images channels-first, frame stacks as channels,
uint8 pixels already scaled to [0, 1]), or for observations in parts (Dict and Tuple envs) a
gymnasium Dict of such Boxes by part key. It must be a torch Module mapping a float32 batch
[B, *shape] (or {key: [B, *shape]}) to features [B, F]; F is read from one forward pass of two
sampled observations. Without one, observations in parts go through raypex's PartsEncoder
(learner/parts_encoder.py). Its
module is imported in every process that builds the network (learner, collectors, evaluator):
install it as a package on every node. Every mistake is one line naming the class and what was
expected (EncoderError), found when the run starts, before any actor does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from raypex.import_path import ImportPathError, resolve_import_path
from raypex.replay.contracts import Parts


class EncoderError(ValueError):
    """network.encoder cannot be used: its one-line reason."""


def encoder_space(obs_shape: tuple[int, ...], obs_dtype: str, parts: Parts = ()):
    """The gymnasium space the encoder is built for: float32 observations of `obs_shape`, pixels
    stored as uint8 scaled to [0, 1] (what `ObservationEncoder` hands the user's module); for
    observations in parts, a Dict of such Boxes."""
    import gymnasium as gym

    if parts:
        return gym.spaces.Dict({key: encoder_space(shape, dtype) for key, shape, dtype in parts})
    if obs_dtype == "uint8":
        return gym.spaces.Box(0.0, 1.0, tuple(obs_shape), np.float32)
    return gym.spaces.Box(-np.inf, np.inf, tuple(obs_shape), np.float32)


def encoder_class(path: str) -> type:
    """The class `package.module:Class` names; EncoderError when it cannot be imported or is not a class."""
    where = f"network.encoder {path}"
    try:
        cls = resolve_import_path(path)
    except ImportPathError as err:
        raise EncoderError(f"{where}: {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise EncoderError(f"{where} is a {type(cls).__name__}, not a torch.nn.Module class")
    return cls


class ObservationEncoder(nn.Module):
    """The user's encoder behind the conversion raypex's own networks do: observations to the
    encoder's dtype, uint8 pixels scaled to [0, 1] on the network's device. `width`: its features.
    `input_scale`: the scale of the observations, or of each part of observations in parts."""

    def __init__(self, inner: nn.Module, input_scale: float | dict[str, float], width: int):
        super().__init__()
        self.inner, self.input_scale, self.width = inner, input_scale, width

    def forward(self, obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        first = next(self.inner.parameters(), None)
        dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
        if isinstance(obs, dict):
            return self.inner({key: _scaled(part.to(dtype), self.input_scale[key]) for key, part in obs.items()})
        return self.inner(_scaled(obs.to(dtype), self.input_scale))


def _scaled(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x if scale == 1.0 else x * scale


def _sample(space, count: int = 2):
    """`count` observations of `space`, stacked (per part for a Dict), kept within +-10."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return {key: _sample(part, count) for key, part in space.spaces.items()}
    return torch.as_tensor(np.clip(np.stack([space.sample() for _ in range(count)]), -10.0, 10.0))


def build_encoder(path: str, kwargs: dict[str, Any], obs_shape: tuple[int, ...], obs_dtype: str,
                  parts: Parts = ()) -> ObservationEncoder:
    """A fresh `Class(observation_space, **kwargs)`, checked on a batch of two sampled observations;
    EncoderError naming the class and what was expected."""
    cls = encoder_class(path)
    space = encoder_space(obs_shape, obs_dtype, parts)
    # how the errors name the sample: one observation's shape and the batch's, or each part's batch
    parts_batch = "{" + ", ".join(f"{key}: [2, {', '.join(map(str, shape))}]" for key, shape, _ in parts) + "}"
    seen = parts_batch if parts else list(obs_shape)
    batch = parts_batch if parts else f"[2, {', '.join(map(str, obs_shape))}]"
    where = f"network.encoder {path}"
    try:
        inner = cls(space, **kwargs)
    except Exception as err:  # noqa: BLE001 - the user's constructor: said in one line
        said = str(err) if isinstance(err, TypeError) else f"{type(err).__name__}: {err}"
        raise EncoderError(f"{where} cannot be built as {cls.__name__}(observation_space, **{kwargs!r}): {said}") from None
    if not isinstance(inner, nn.Module):
        raise EncoderError(f"{where} built a {type(inner).__name__}, not a torch.nn.Module")
    sample = _sample(space)
    try:
        with torch.no_grad():
            out = inner(sample)
    except Exception as err:  # noqa: BLE001 - the user's forward: said in one line
        raise EncoderError(f"{where} failed on a batch of 2 observations of shape {seen}: "
                           f"{type(err).__name__}: {err}") from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 2 or not out.is_floating_point():
        got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise EncoderError(f"{where} must map a batch {batch} to float features [2, F]; it gave {got}")
    scale = ({key: 1.0 / 255.0 if dtype == "uint8" else 1.0 for key, _, dtype in parts} if parts
             else 1.0 / 255.0 if obs_dtype == "uint8" else 1.0)
    return ObservationEncoder(inner, scale, int(out.shape[1]))


def encoder_from(settings, image_encoder=None) -> nn.Module | None:
    """A fresh one of the encoder the settings name (a learner's, collector's or evaluator's); for
    observations in parts without one, raypex's PartsEncoder with `image_encoder` for its image parts
    (default: a Q-network's convolutions); else None for raypex's own networks."""
    parts = tuple(settings.obs_parts)
    if settings.encoder is not None:
        return build_encoder(settings.encoder, dict(settings.encoder_kwargs), tuple(settings.obs_shape),
                             settings.obs_dtype, parts)
    if parts:
        from raypex.learner.networks import ConvFeatures
        from raypex.learner.parts_encoder import PartsEncoder

        return PartsEncoder(parts, image_encoder or ConvFeatures)
    return None


def user_encoder(settings) -> Callable[[], nn.Module] | None:
    """What builds a fresh one of the settings' encoder for each network of an actor-critic that has
    its own (an actor's, its critics'): the user's, or for observations in parts raypex's with the
    actor-critic's image encoder; None for raypex's own networks."""
    if settings.encoder is None and not settings.obs_parts:
        return None
    from raypex.learner.actor_critic_networks import ImageEncoder

    return functools.partial(encoder_from, settings, ImageEncoder)
