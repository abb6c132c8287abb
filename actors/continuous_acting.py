"""ActorPolicy: acting with an actor over Box actions (TD3's, SAC's; actors/policy.py), in numpy for
flat observations (the process never imports torch), in torch on the CPU for images (numpy has no
convolutions).

Actions are in [-1, 1] here and in replay (the collector maps them to the env's bounds with
actors/action_scaling.py). Until the learner's first trained weights arrive the policy acts
uniformly at random: the replay warm-up (the collector does not load a fresh learner's starting
weights, `Weights.untrained`). Then a deterministic actor's action gets Gaussian noise of this
collector's own scale (spread over the collectors, as Ape-X spreads epsilon: cluster/plan/settings.py
collector_noise), and a sampling actor (SAC's) samples its squashed Gaussian. Greedy (the
evaluator) is the actor's deterministic action.
"""

from __future__ import annotations

import numpy as np

from raypex.actors.policy import Stateless
from raypex.actors.settings import CollectorSettings, EvaluatorSettings
from raypex.learner.numpy_mlp import NumpyMLPActor


class ActorPolicy(Stateless):
    """Exploring (or deterministic) actions of the published actor weights, in [-1, 1]."""

    precision = "fp32"
    # A fresh learner's untrained actor would fill the warm-up with one near-constant action per
    # observation, so collectors keep acting uniformly at random until trained weights come.
    acts_with_untrained_weights = False

    def __init__(self, gaussian: bool, action_dim: int, noise: float, rng: np.random.Generator,
                 obs_shape: tuple[int, ...] = (), obs_dtype: str = "float32", hidden: list[int] | None = None):
        """`gaussian`: the actor samples a squashed Gaussian (else its actions get `noise`)."""
        self.gaussian, self.action_dim, self.noise, self.rng = gaussian, action_dim, noise, rng
        self.exploration = "noise" if noise else None  # a sampling actor has no exploration rate
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

    def exploration_rate(self, env_steps: int) -> float:
        """The collector's action noise (0 for an actor that samples)."""
        return self.noise

    def act(self, obs: np.ndarray, state: None, env_steps: int, explore: bool = True):
        """[B, action_dim] float32 actions in [-1, 1]: explored, or the actor's deterministic ones."""
        if self.network is None:
            return self.rng.uniform(-1.0, 1.0, (len(obs), self.action_dim)).astype(np.float32), {}, None
        if not explore:
            return self.network.actions(obs).astype(np.float32), {}, None
        if self.gaussian:
            return self.network.sample(obs, self.rng).astype(np.float32), {}, None
        actions = self.network.actions(obs)
        if self.noise:
            actions = actions + self.noise * self.rng.standard_normal(actions.shape)
        return np.clip(actions, -1.0, 1.0).astype(np.float32), {}, None


def collector_actor_policy(s: CollectorSettings, seed: int, gaussian: bool) -> ActorPolicy:
    """A collector's: its own action noise (or the actor's samples), random until trained weights come."""
    return ActorPolicy(gaussian, s.action_dim, s.action_noise, np.random.default_rng(seed + 1), tuple(s.obs_shape),
                       s.obs_dtype, s.hidden)


def greedy_actor_policy(s: EvaluatorSettings, gaussian: bool) -> ActorPolicy:
    """The evaluator's: the actor's deterministic actions."""
    return ActorPolicy(gaussian, len(s.action_low), 0.0, np.random.default_rng(s.seed), tuple(s.obs_shape),
                       s.obs_dtype, s.hidden)
