"""ContinuousActingPolicy: the actor a collector acts with over Box actions (TD3's, SAC's): in numpy for flat observations (the
process never imports torch), in torch on the CPU for images (numpy has no convolutions).

Actions are in [-1, 1] here and in replay (the collector maps them to the env's bounds with
actors/action_scaling.py). Until the learner's first trained weights arrive the policy acts
uniformly at random: the replay warm-up (the collector does not load a fresh learner's starting
weights, `Weights.untrained`). Then a deterministic head's action gets Gaussian noise of this
collector's own scale (spread over the collectors, as Ape-X spreads epsilon: cluster/plan/settings.py
collector_noise), and a gaussian head samples its squashed Gaussian.
"""

from __future__ import annotations

import numpy as np

from raypex.learner.numpy_mlp import NumpyMLPActor


class ContinuousActingPolicy:
    """Exploring actions of the published actor weights, in [-1, 1]."""

    precision = "fp32"

    def __init__(self, head: str, action_dim: int, noise: float, rng: np.random.Generator,
                 obs_shape: tuple[int, ...] = (), obs_dtype: str = "float32", hidden: list[int] | None = None):
        """`head`: deterministic (actions plus `noise`) or gaussian (sampled)."""
        self.gaussian, self.action_dim, self.noise, self.rng = head == "gaussian", action_dim, noise, rng
        self.network = None  # a NumpyMLPActor or TorchActorForward once weights arrived
        self._image_actor = None
        if len(obs_shape) > 1:
            import torch

            from raypex.learner.actor_critic_networks import TorchActorForward

            torch.set_num_threads(1)
            self._image_actor = TorchActorForward(tuple(obs_shape), obs_dtype, action_dim, list(hidden or []),
                                                  gaussian=self.gaussian)

    @property
    def form(self) -> str:
        """What acts, in words (the start-up line's acting form)."""
        return "numpy" if self._image_actor is None else "fp32, torch"

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Act with these actor weights (ActorNetwork's state-dict arrays) from now on."""
        self.network = NumpyMLPActor(arrays) if self._image_actor is None else self._image_actor.load(arrays)

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """[B, action_dim] float32 actions in [-1, 1] to step the envs with."""
        if self.network is None:
            return self.rng.uniform(-1.0, 1.0, (len(obs), self.action_dim)).astype(np.float32)
        if self.gaussian:
            return self.network.sample(obs, self.rng).astype(np.float32)
        actions = self.network.actions(obs)
        if self.noise:
            actions = actions + self.noise * self.rng.standard_normal(actions.shape)
        return np.clip(actions, -1.0, 1.0).astype(np.float32)
