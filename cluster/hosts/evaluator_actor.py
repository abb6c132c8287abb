"""EvaluatorActor: a run's evaluations in their own process, beside the learner.

The driver hands it one published weights version at a time (cluster/driver/evaluation.py); what
it does with them is WeightsEvaluator's (cluster/hosts/weights_evaluator.py), which has no Ray in
it so that the local runtime, without Ray, evaluates the same way.
"""

from __future__ import annotations

import os

from raypex.cluster.hosts.ray_seams import QUIET
from raypex.cluster.hosts.weights_evaluator import WeightsEvaluator


class EvaluatorActor(WeightsEvaluator):
    """WeightsEvaluator as the run's Ray actor."""

    @QUIET  # several a second on small envs
    def evaluate(self, weights, give_up: tuple[float, float] | None = None, record: bool = False) -> dict | None:
        """WeightsEvaluator.evaluate, without a task event in Ray's GCS per call."""
        return super().evaluate(weights, give_up, record)

    def pid(self) -> int:
        """This actor's process id (bench reads its resident memory)."""
        return os.getpid()
