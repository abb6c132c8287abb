"""WeightsEvaluator: greedy evaluation of published weights, with no Ray in it.

The learner never pauses training to evaluate: in a run the evaluator actor
(cluster/hosts/evaluator_actor.py, this class hosted by Ray) is handed a published weights version
(a Weights message the learner returned) and the driver reads the returns when they are done; the
local runtime (cluster/local/) calls this class in its own process. MLP
Q-networks, recurrent ones and td3/sac actors on flat observations are evaluated in numpy
(learner/numpy_mlp.py, learner/numpy_recurrent.py),
so for flat observations it never imports torch; the actor starts while the learner warms up,
on the same cores. Networks on images are evaluated with torch.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from raypex.actors.settings import EvaluatorSettings


class WeightsEvaluator:
    """Holds the evaluation vector env and the network it evaluates weights with."""

    def __init__(self, s: EvaluatorSettings):
        from raypex.actors.action_scaling import ActionScale
        from raypex.actors.evaluator import Evaluator

        # Box actions: the published weights are a td3/sac actor, acted with deterministically
        self.action_scale = ActionScale(s.action_low, s.action_high) if s.action_low else None
        obs_shape, obs_dtype = tuple(s.obs_shape), s.obs_dtype
        self.obs_shape, self.obs_dtype, self.hidden, self.head = obs_shape, obs_dtype, s.hidden, s.head
        self.torch_network = None  # a CNN Q-network, or an image actor (TorchActorForward)
        self.recurrent = None  # a recurrent network's step (actors/recurrent_acting.py), once weights came
        if len(obs_shape) != 1:
            import torch

            torch.set_num_threads(1)
            if self.action_scale is None and s.head != "recurrent_q":
                from raypex.learner.networks import build_q_network

                self.torch_network = build_q_network(obs_shape, s.num_actions, s.hidden, s.dueling, obs_dtype, s.layer_norm).eval()
        self.evaluator = Evaluator(s.env_id, s.env_kwargs, s.episodes, s.seed, s.frame_stack, s.epsilon, s.stacked)

    def _policy(self, arrays: dict[str, np.ndarray]):
        if self.action_scale is not None:
            actor, scale = self._actor(arrays), self.action_scale
            return lambda obs: scale.to_env(actor.actions(obs))
        if self.head == "recurrent_q":  # each episode's state carried from step to step
            from raypex.actors.recurrent_acting import recurrent_stepper
            from raypex.learner.numpy_recurrent import RecurrentGreedy

            self.recurrent = recurrent_stepper(self.obs_shape, self.obs_dtype, arrays, self.recurrent)
            return RecurrentGreedy(self.recurrent, self.evaluator.episodes)
        if self.torch_network is None:
            from raypex.learner.numpy_mlp import NumpyMLPQ

            return NumpyMLPQ(arrays).greedy_actions
        from raypex.learner.networks import greedy_actions
        from raypex.learner.weights import load_arrays

        load_arrays(self.torch_network, arrays)
        return functools.partial(greedy_actions, self.torch_network)

    def _actor(self, arrays: dict[str, np.ndarray]):
        """The deterministic actor of an actor head's weights: numpy for flat observations, torch for
        images (built once, on the first weights)."""
        if len(self.obs_shape) == 1:
            from raypex.learner.numpy_mlp import NumpyMLPActor

            return NumpyMLPActor(arrays)
        if self.torch_network is None:
            from raypex.learner.actor_critic_networks import TorchActorForward

            self.torch_network = TorchActorForward(self.obs_shape, self.obs_dtype, len(self.action_scale.low),
                                                   self.hidden, gaussian=self.head == "gaussian")
        return self.torch_network.load(arrays)

    def evaluate(self, weights, give_up: tuple[float, float] | None = None, record: bool = False) -> dict | None:
        """Mean and min greedy return of a published Weights message (Ray resolves its ref).

        With `give_up` (see Evaluator.evaluate) an evaluation that cannot reach its target stops
        early and reports `complete: False` with no returns. With `record` the result
        carries the first episode as `video` (an EncodedVideo, actors/apng.py) when the env has
        pictures.
        None when there were no weights: the ref was a learner's answer given by the process Ray
        had just restarted, before it published any (the driver counts that evaluation as lost).
        """
        if weights is None:
            return None
        started = time.thread_time()
        returns = self.evaluator.evaluate(self._policy(weights.arrays), give_up, record)
        version, cpu_s = weights.version, time.thread_time() - started  # what the evaluation cost its core
        if returns is None:
            return {"version": version, "complete": False, "mean": None, "min": None, "cpu_s": cpu_s}
        result = {"version": version, "complete": True, "mean": float(returns.mean()), "min": float(returns.min()),
                  "cpu_s": cpu_s}
        if record and self.evaluator.video is not None:
            result["video"] = self.evaluator.video
        return result
