"""Random batches shaped like the ones replay serves, for warm-up, capture and the bench."""

from __future__ import annotations

import numpy as np
import torch

from raypex.learner.settings import LearnerSettings


def synthetic_batch(settings: LearnerSettings, device: torch.device,
                    rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """A random [G, B, ...] batch of the fields the algorithm's plug-in trains on (its batch_spec),
    with the shapes and dtypes replay serves, for warm-up and capture (random, not zeros: zeros can
    take faster paths than real data). Values are plausible for each field: pixels in [0, 255],
    Box actions in [-1, 1], discounts below 1, importance weights in (0, 1], episodes' first steps
    one in twenty."""
    from raypex.learner.algorithms.registry import algorithm

    groups = (settings.accumulation_steps, settings.micro_batch)
    arrays = {}
    for name, (shape, dtype) in algorithm(settings.algo).batch_spec(settings).items():
        full = (*groups, *shape)
        if dtype == "uint8":
            arrays[name] = rng.integers(0, 256, full, dtype=np.uint8)
        elif dtype == "int64":
            arrays[name] = rng.integers(0, max(settings.num_actions, 1), full)
        elif name == "action":
            arrays[name] = rng.uniform(-1.0, 1.0, full).astype(np.float32)
        elif name == "discount":
            arrays[name] = np.full(full, 0.97, np.float32)
        elif name == "weight":
            arrays[name] = rng.uniform(0.1, 1.0, full).astype(np.float32)
        elif dtype == "bool":  # R2D2's `first`: an episode starts now and then
            arrays[name] = rng.random(full) < 0.05
        else:
            arrays[name] = rng.normal(size=full).astype(dtype)
    return {name: torch.from_numpy(array).to(device) for name, array in arrays.items()}


def synthetic_index_batch(settings: LearnerSettings, replay, device: torch.device,
                          rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """A random [G, B, ...] batch of indices into `replay`'s columns (a ShardedReplay whose
    columns are on `device`), with importance weights when prioritized."""
    arrays = replay.random_index(settings.accumulation_steps, settings.micro_batch, rng)
    if settings.prioritized:
        arrays["weight"] = rng.uniform(0.1, 1.0, (settings.accumulation_steps, settings.micro_batch)).astype(np.float32)
    return {name: torch.from_numpy(array).to(device) for name, array in arrays.items()}
