"""ActorPolicy: acting with an actor over Box actions (TD3's, SAC's; actors/policy.py) through its
acting graph (actors/onnx_acting.py): the deterministic action, and for SAC's Gaussian actor the
mean and log std its samples are drawn around.

Actions are in [-1, 1] here and in replay (the collector maps them to the env's bounds with
actors/action_scaling.py). Until the learner's first trained weights arrive the policy acts
uniformly at random: the replay warm-up (the collector does not load a fresh learner's starting
weights, `Weights.untrained`). Then a deterministic actor's action gets Gaussian noise of this
collector's own scale (spread over the collectors, as Ape-X spreads epsilon: cluster/plan/settings.py
collector_noise), and a sampling actor (SAC's) samples its squashed Gaussian,
tanh(mean + exp(log_std) * noise). Greedy (the evaluator) is the actor's deterministic action.
"""

from __future__ import annotations

import numpy as np

from raypex.actors.onnx_acting import ActsThroughGraph
from raypex.actors.policy import Stateless
from raypex.actors.served_acting import ServedForward
from raypex.actors.settings import CollectorSettings, EvaluatorSettings
from raypex.replay.contracts import batch_size


class ActorPolicy(ActsThroughGraph, Stateless):
    """Exploring (or deterministic) actions of the published actor weights, in [-1, 1]."""

    # A fresh learner's untrained actor would fill the warm-up with one near-constant action per
    # observation, so collectors keep acting uniformly at random until trained weights come.
    acts_with_untrained_weights = False

    def __init__(self, gaussian: bool, action_dim: int, noise: float, rng: np.random.Generator,
                 graph: ServedForward | None = None):
        """`gaussian`: the actor samples a squashed Gaussian (else its actions get `noise`); `graph`:
        the node's acting server (default: the graph in this process)."""
        self.gaussian, self.action_dim, self.noise, self.rng = gaussian, action_dim, noise, rng
        self.exploration = "noise" if noise else None  # a sampling actor has no exploration rate
        self.use(graph)

    def exploration_rate(self, env_steps: int) -> float:
        """The collector's action noise (0 for an actor that samples)."""
        return self.noise

    def act(self, obs: np.ndarray, state: None, env_steps: int, explore: bool = True):
        """[B, action_dim] float32 actions in [-1, 1]: explored, or the actor's deterministic ones."""
        if not self.graph.loaded:
            return self.rng.uniform(-1.0, 1.0, (batch_size(obs), self.action_dim)).astype(np.float32), {}, None
        outputs = self.graph.run(obs=obs)
        if not explore:
            return outputs[0], {}, None
        if self.gaussian:
            _, mean, log_std = outputs
            noise = self.rng.standard_normal(mean.shape).astype(np.float32)
            return np.tanh(mean + np.exp(log_std) * noise), {}, None
        actions = outputs[0]
        if self.noise:
            actions = actions + self.noise * self.rng.standard_normal(actions.shape)
        return np.clip(actions, -1.0, 1.0).astype(np.float32), {}, None


def collector_actor_policy(s: CollectorSettings, seed: int, gaussian: bool,
                           served: ServedForward | None = None) -> ActorPolicy:
    """A collector's: its own action noise (or the actor's samples), random until trained weights come."""
    return ActorPolicy(gaussian, s.action_dim, s.action_noise, np.random.default_rng(seed + 1), served)


def greedy_actor_policy(s: EvaluatorSettings, gaussian: bool) -> ActorPolicy:
    """The evaluator's: the actor's deterministic actions."""
    return ActorPolicy(gaussian, len(s.action_low), 0.0, np.random.default_rng(s.seed))
