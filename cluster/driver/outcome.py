"""RunOutcome: what a run's evaluations found and how the run ended.

It decides when an evaluation solves the run (the first complete one reaching stop.eval_return),
remembers which weights to export, and carries the end reason that summary.json reports: solved,
env_steps, interrupted, terminated, or "failed: <what died>".
"""

from __future__ import annotations

import time


class RunOutcome:
    """Evaluation results, the solve, and the end reason of one run."""

    def __init__(self, target: float | None, clock_start: float):
        self.target = target  # stop.eval_return, or None: never solved
        self.clock_start = clock_start  # time_to_solve_s counts from here (the command's start)
        self.time_to_solve_s: float | None = None
        self.env_steps_at_solve: int | None = None
        self.final_eval: float | None = None  # the newest complete evaluation's mean return
        self.solved_weights = None  # the weights ref whose evaluation reached the target
        self.last_evaluated: tuple | None = None  # (weights ref, version) of the newest complete evaluation
        self.ended: str | None = None  # None while the run goes on

    def record_evaluation(self, result: dict, weights_ref, env_steps: int) -> bool:
        """Note a complete evaluation; True when it is the one that solves the run."""
        self.final_eval = result["mean"]
        self.last_evaluated = (weights_ref, result["version"])
        if self.target is None or result["mean"] < self.target or self.time_to_solve_s is not None:
            return False
        self.time_to_solve_s = time.time() - self.clock_start
        self.env_steps_at_solve = env_steps
        self.solved_weights = weights_ref
        self.ended = "solved"
        return True

    def forget_weights(self) -> None:
        """Drop weights refs whose learner died (its objects went with it); the export then
        falls back to the newest weights of the learner that replaced it."""
        self.solved_weights = None
        self.last_evaluated = None

    def fields(self) -> dict:
        """Its part of summary.json."""
        return {
            "time_to_solve_s": None if self.time_to_solve_s is None else round(self.time_to_solve_s, 3),
            "env_steps_at_solve": self.env_steps_at_solve,
            "final_eval_return": self.final_eval,
            "ended": self.ended,
        }
