"""WeightsEvaluator: greedy evaluation of published weights, with no Ray in it.

The learner never pauses training to evaluate: in a run the evaluator actor
(cluster/hosts/evaluator_actor.py, this class hosted by Ray) is handed a published weights version
(a Weights message the learner returned) and the driver reads the returns when they are done; the
local runtime (cluster/local/) calls this class in its own process. It acts with the greedy policy
of the algorithm's plug-in (actors/policy.py), which runs the published acting graph in ONNX Runtime
(actors/onnx_acting.py), so the actor never imports torch and starts while the learner warms up, on
the same cores.
"""

from __future__ import annotations

import time

import numpy as np

from raypex.actors.settings import EvaluatorSettings
from raypex.replay.contracts import Weights


class WeightsEvaluator:
    """Holds the evaluation vector env and the greedy policy it evaluates weights with."""

    def __init__(self, s: EvaluatorSettings):
        from raypex.actors.action_scaling import ActionScale
        from raypex.actors.evaluator import Evaluator
        from raypex.learner.algorithms.registry import algorithm

        self.policy = algorithm(s.algo).greedy_policy(s)
        self.action_scale = ActionScale(s.action_low, s.action_high) if s.action_low else None  # Box actions
        self.evaluator = Evaluator(s.env_id, s.env_kwargs, s.episodes, s.seed, s.frame_stack, s.epsilon, s.stacked,
                                   s.env_wrappers, max_episode_steps=s.max_episode_steps)

    def _policy(self, weights: Weights):
        """Greedy actions of these weights, in the env's units, each episode's state (if the
        policy keeps one) carried from its first step."""
        self.policy.load(weights)
        state = self.policy.initial_state(self.evaluator.episodes)

        def act(obs: np.ndarray) -> np.ndarray:
            nonlocal state
            actions, _, state = self.policy.act(obs, state, 0, explore=False)
            return actions if self.action_scale is None else self.action_scale.to_env(actions)

        return act

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
        returns = self.evaluator.evaluate(self._policy(weights), give_up, record)
        version, cpu_s = weights.version, time.thread_time() - started  # what the evaluation cost its core
        if returns is None:
            return {"version": version, "complete": False, "mean": None, "min": None, "cpu_s": cpu_s}
        result = {"version": version, "complete": True, "mean": float(returns.mean()), "min": float(returns.min()),
                  "cpu_s": cpu_s}
        if record and self.evaluator.video is not None:
            result["video"] = self.evaluator.video
        return result
