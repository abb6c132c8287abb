"""ContinuousActingPolicy: a TD3 or SAC collector's actor, in numpy (its process never imports torch).

Actions are in [-1, 1] here and in replay (the collector maps them to the env's bounds with
actors/action_scaling.py). Until the learner's first weights arrive the policy acts uniformly at
random: the replay warm-up. Then TD3 adds Gaussian noise of this collector's own scale (spread over
the collectors, as Ape-X spreads epsilon: cluster/config/settings.py collector_noise) to the
deterministic action, and SAC samples its squashed Gaussian.
"""

from __future__ import annotations

import numpy as np

from learner.numpy_mlp import NumpyMLPActor


class ContinuousActingPolicy:
    """Exploring actions of the published actor weights, in [-1, 1]."""

    precision = "fp32"
    form = "numpy"

    def __init__(self, algo: str, action_dim: int, noise: float, rng: np.random.Generator):
        self.algo, self.action_dim, self.noise, self.rng = algo, action_dim, noise, rng
        self.network: NumpyMLPActor | None = None

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Act with these actor weights (MLPActor's state-dict arrays) from now on."""
        self.network = NumpyMLPActor(arrays)

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """[B, action_dim] float32 actions in [-1, 1] to step the envs with."""
        if self.network is None:
            return self.rng.uniform(-1.0, 1.0, (len(obs), self.action_dim)).astype(np.float32)
        if self.algo == "sac":
            return self.network.sample(obs, self.rng).astype(np.float32)
        actions = self.network.actions(obs)
        if self.noise:
            actions = actions + self.noise * self.rng.standard_normal(actions.shape)
        return np.clip(actions, -1.0, 1.0).astype(np.float32)
