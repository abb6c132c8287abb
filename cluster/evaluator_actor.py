"""EvaluatorActor: greedy evaluation in its own process, beside the learner.

The learner never pauses training to evaluate: the driver hands this actor a published weights
version (the same object-store ref the collectors fetch) and reads the returns when they are done.
One evaluation runs at a time and the driver always sends the newest version, so evaluations
never queue up behind a busy evaluator. torch is imported inside the actor only.
"""

from __future__ import annotations

import functools
import os

import numpy as np


class EvaluatorActor:
    """Holds the evaluation vector env and a CPU copy of the Q-network."""

    def __init__(self, env_id: str, env_kwargs: dict, episodes: int, seed: int,
                 obs_shape: tuple[int, ...], num_actions: int, hidden: list[int], dueling: bool,
                 frame_stack: int, epsilon: float):
        import torch

        from actors.evaluator import Evaluator
        from learner.networks import build_q_network, greedy_actions

        torch.set_num_threads(1)
        self.network = build_q_network(obs_shape, num_actions, hidden, dueling).eval()
        self.policy = functools.partial(greedy_actions, self.network)
        self.evaluator = Evaluator(env_id, env_kwargs, episodes, seed, frame_stack, epsilon)

    def evaluate(self, arrays: dict[str, np.ndarray], version: int) -> dict:
        """Mean and min greedy return of weights `version` (Ray resolves the ref to `arrays`)."""
        from learner.weights import load_arrays

        load_arrays(self.network, arrays)
        returns = self.evaluator.evaluate(self.policy)
        return {"version": version, "mean": float(returns.mean()), "min": float(returns.min())}

    def pid(self) -> int:
        """This actor's process id (bench reads its resident memory)."""
        return os.getpid()
