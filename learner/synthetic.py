"""Random batches shaped like the ones replay serves, for warm-up, capture and the bench."""

from __future__ import annotations

import numpy as np
import torch

from learner.settings import LearnerSettings


def synthetic_batch(settings: LearnerSettings, device: torch.device,
                    rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """A random [G, B, ...] batch with the shapes and dtypes replay serves (uint8 pixels, frames
    once when `frames_per_sample` is set), for warm-up and capture (random, not zeros: zeros can
    take faster paths than real data)."""
    shape = (settings.accumulation_steps, settings.micro_batch)
    arrays = {
        "action": rng.integers(0, settings.num_actions, shape),
        "return": rng.normal(size=shape).astype(np.float32),
        "discount": np.full(shape, 0.97, np.float32),
    }
    if settings.prioritized:
        arrays["weight"] = rng.uniform(0.1, 1.0, shape).astype(np.float32)
    if settings.frames_per_sample:
        stack, *frame_shape = settings.obs_shape
        width = settings.micro_batch * settings.frames_per_sample
        arrays["frames"] = rng.integers(0, 256, (shape[0], width, *frame_shape), dtype=np.uint8)
        arrays["obs_index"] = rng.integers(0, width, (*shape, stack))
        arrays["next_index"] = rng.integers(0, width, (*shape, stack))
    elif settings.obs_dtype == "uint8":
        arrays["obs"], arrays["next_obs"] = rng.integers(0, 256, (2, *shape, *settings.obs_shape), dtype=np.uint8)
    else:
        arrays["obs"], arrays["next_obs"] = rng.normal(size=(2, *shape, *settings.obs_shape)).astype(np.float32)
    return {name: torch.from_numpy(array).to(device) for name, array in arrays.items()}
