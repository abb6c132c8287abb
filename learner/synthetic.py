"""Random batches shaped like the ones replay serves, for warm-up, capture and the bench."""

from __future__ import annotations

import numpy as np
import torch

from raypex.learner.settings import LearnerSettings


def synthetic_batch(settings: LearnerSettings, device: torch.device,
                    rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """A random [G, B, ...] batch of training fields with the shapes and dtypes replay serves
    (uint8 pixels), for warm-up and capture (random, not zeros: zeros can take faster paths than
    real data)."""
    shape = (settings.accumulation_steps, settings.micro_batch)
    arrays = {
        "action": (rng.uniform(-1.0, 1.0, (*shape, settings.action_dim)).astype(np.float32) if settings.action_dim
                   else rng.integers(0, settings.num_actions, shape)),
        "return": rng.normal(size=shape).astype(np.float32),
        "discount": np.full(shape, 0.97, np.float32),
    }
    if settings.prioritized:
        arrays["weight"] = rng.uniform(0.1, 1.0, shape).astype(np.float32)
    if settings.obs_dtype == "uint8":
        arrays["obs"], arrays["next_obs"] = rng.integers(0, 256, (2, *shape, *settings.obs_shape), dtype=np.uint8)
    else:
        arrays["obs"], arrays["next_obs"] = rng.normal(size=(2, *shape, *settings.obs_shape)).astype(np.float32)
    return {name: torch.from_numpy(array).to(device) for name, array in arrays.items()}


def synthetic_index_batch(settings: LearnerSettings, replay, device: torch.device,
                          rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """A random [G, B, ...] batch of indices into `replay`'s columns (a ShardedReplay whose
    columns are on `device`), with importance weights when prioritized."""
    arrays = replay.random_index(settings.accumulation_steps, settings.micro_batch, rng)
    if settings.prioritized:
        arrays["weight"] = rng.uniform(0.1, 1.0, (settings.accumulation_steps, settings.micro_batch)).astype(np.float32)
    return {name: torch.from_numpy(array).to(device) for name, array in arrays.items()}
