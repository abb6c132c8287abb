"""Box actions between the env's units and the [-1, 1] the actor's tanh gives.

Replay stores, and the critics learn on, actions in [-1, 1] in every dimension, so exploration
noise, TD3's target smoothing and SAC's squashing are scale-free. Collectors, the evaluator and
policy.pt2 convert to the env's own bounds at the last moment.
"""

from __future__ import annotations

import numpy as np


class ActionScale:
    """The affine map between [-1, 1] and an env's [low, high] per dimension."""

    def __init__(self, low, high):
        self.low = np.asarray(low, np.float32)
        self.high = np.asarray(high, np.float32)
        if self.low.shape != self.high.shape or not (self.high > self.low).all():
            raise ValueError(f"action bounds need low < high in every dimension, got {low} and {high}")
        self.center = (self.high + self.low) / 2
        self.half_range = (self.high - self.low) / 2

    def to_env(self, unit: np.ndarray) -> np.ndarray:
        """[-1, 1] actions (clipped there first) -> the env's units."""
        return (self.center + self.half_range * np.clip(unit, -1.0, 1.0)).astype(np.float32)

    def to_unit(self, env_action: np.ndarray) -> np.ndarray:
        """Env-unit actions -> [-1, 1] (the inverse of `to_env` inside the bounds)."""
        return ((np.asarray(env_action, np.float32) - self.center) / self.half_range).astype(np.float32)
