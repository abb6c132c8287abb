"""RunOutcome: what a run's evaluations found and how the run ended.

It decides when an evaluation solves the run (the first complete one reaching stop.eval_return),
remembers which weights to export (the solving version, else the best-evaluated one, so a run
that trains on past its peak does not export a collapsed policy), and carries the end reason that
summary.json reports: solved, env_steps, interrupted, terminated, or "failed: <what died>".
"""

from __future__ import annotations

import time
from typing import NamedTuple


class Evaluated(NamedTuple):
    """An evaluated weights version: its ref (to export it), its version and its mean return."""

    weights: object
    version: int
    mean: float


class PolicyFile(NamedTuple):
    """What policy.pt2 holds: its evaluation's mean return (None: never evaluated) and weights version."""

    eval_return: float | None
    version: int | None


class RunOutcome:
    """Evaluation results, the solve, and the end reason of one run."""

    def __init__(self, target: float | None, clock_start: float, kept_policy: PolicyFile | None = None):
        self.target = target  # stop.eval_return, or None: never solved
        self.clock_start = clock_start  # time_to_solve_s counts from here (the command's start)
        self.time_to_solve_s: float | None = None
        self.env_steps_at_solve: int | None = None  # when the solve was seen
        self.solve_weights_env_steps: int | None = None  # when the solving evaluation took its weights
        self.solve_seen_after_s: float | None = None  # from taking them to the solve seen
        self.final_eval: float | None = None  # the newest complete evaluation's mean return
        self.solved: Evaluated | None = None  # the evaluation that reached the target
        self.best: Evaluated | None = None  # the best evaluation
        self.policy: PolicyFile | None = kept_policy  # a resumed run's policy.pt2, then what this run exported
        self.ended: str | None = None  # None while the run goes on

    def note_evaluation(self, result: dict, weights_ref) -> None:
        """Note a complete evaluation (the final one too) as the newest and, if it is, the best."""
        self.final_eval = result["mean"]
        if self.best is None or result["mean"] > self.best.mean:
            self.best = Evaluated(weights_ref, result["version"], result["mean"])

    def record_evaluation(self, result: dict, weights_ref, env_steps: int, taken) -> bool:
        """Note a complete evaluation during the run (it finished now, at `env_steps`; it took its
        weights at `taken`, evaluation.Taken); True when it is the one that solves it."""
        self.note_evaluation(result, weights_ref)
        if self.target is None or result["mean"] < self.target or self.time_to_solve_s is not None:
            return False
        now = time.time()
        self.time_to_solve_s = now - self.clock_start
        self.env_steps_at_solve = env_steps
        self.solve_weights_env_steps = taken.env_steps
        self.solve_seen_after_s = now - taken.at_s
        self.solved = Evaluated(weights_ref, result["version"], result["mean"])
        self.ended = "solved"
        return True

    def forget_weights(self) -> None:
        """Drop weights refs whose learner died (its objects went with it); the export then
        falls back to the newest weights of the learner that replaced it."""
        self.solved = None
        self.best = None

    def to_export(self) -> Evaluated | None:
        """The evaluated weights policy.pt2 gets: the solving version, else the best
        evaluated one; None when policy.pt2 should stay as it is (a resumed run whose kept policy
        scored at least as well) or when nothing was evaluated."""
        if self.solved is not None:
            return self.solved
        if self.best is None or (self.policy is not None and self.policy.eval_return is not None
                                 and self.best.mean <= self.policy.eval_return):
            return None
        return self.best

    def fields(self) -> dict:
        """Its part of summary.json."""
        return {
            "time_to_solve_s": None if self.time_to_solve_s is None else round(self.time_to_solve_s, 3),
            "env_steps_at_solve": self.env_steps_at_solve,
            "solve_weights_env_steps": self.solve_weights_env_steps,
            "solve_seen_after_s": None if self.solve_seen_after_s is None else round(self.solve_seen_after_s, 3),
            "final_eval_return": self.final_eval,
            "ended": self.ended,
            "policy_eval_return": None if self.policy is None else self.policy.eval_return,
            "policy_version": None if self.policy is None else self.policy.version,
        }
