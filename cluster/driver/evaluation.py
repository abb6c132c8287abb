"""EvaluationScheduler: when the evaluator actor gets which weights.

An evaluation of the newest published weights becomes due every `eval.every_env_steps` env steps,
and, with `eval.every_s`, also once that many seconds have passed since the last one became due;
it starts as soon as none is running (one at a time, while the learner keeps training) and the
learner has published weights since the last one started (the same weights are never evaluated
twice), on the Weights the learner returns by value when asked: that ref is the driver's own, it
outlives the learner, and no ref travels inside a reply. Counting env steps, not epochs, keeps the
curve's spacing the same whatever the batch shape or replay ratio. With a give-up bound (eval.max_return known), an
evaluation may stop once stop.eval_return is out of reach, except every FULL_EVAL_EVERY-th, which
runs to the end so eval/return_mean keeps a curve, and every `eval.video_every`-th, which runs to
the end and records its first episode's pictures for the run's video.

Evaluation is optional to training: when the evaluator dies, Ray restarts it (wiring.py) and the
evaluation it was running is lost, counted in `lost`; the next one waits until the new process is
up. Ray refuses a call made while the actor restarts (ActorUnavailableError, at once), so an
evaluation started then would be lost too: on a busy 2-core box a restart takes seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from raypex.cluster.hosts.learner_host import refused_by_a_restarted_learner

FULL_EVAL_EVERY = 5
EVALUATOR_BACK_S = 60  # the run's final evaluation waits this long for a restarting evaluator


def mark_after(env_steps: int, every: int) -> int:
    """The first multiple of `every` env steps above `env_steps`: when the next evaluation is due."""
    return (env_steps // every + 1) * every


class Taken(NamedTuple):
    """When an evaluation took its weights: seconds on the driver's clock (time.time) and env steps."""

    at_s: float
    env_steps: int


class EvaluationScheduler:
    """Starts evaluations on the evaluator actor and hands back their results with their weights."""

    def __init__(self, runtime, evaluator, every_env_steps: int, every_s: float | None,
                 give_up: tuple[float, float] | None, newest_weights: Callable[[], object], video_every: int = 0,
                 clock: Callable[[], float] = time.time):
        self.rt = runtime  # where the evaluator runs (cluster/driver/runtime.py)
        self.evaluator = evaluator
        self.every_env_steps = every_env_steps
        self.every_s = every_s  # None: by env steps only
        self.give_up = give_up  # None: every evaluation runs to the end
        self.newest_weights = newest_weights  # asks the learner for its newest Weights
        self.video_every = video_every  # every this many evaluations one is recorded (0: none)
        self.recorded = False  # whether one was: the final evaluation records when none was
        self.clock = clock
        self.new_weights = False  # the learner published weights since the last evaluation started
        self.started = 0
        self.lost = 0  # evaluations lost to the evaluator's death
        self.env_steps = 0  # the run's count at the newest poll
        self._next_mark: int | None = None  # the env steps at which the next evaluation is due
        self._due_at_s = clock()  # when the newest evaluation became due (or the scheduler started)
        self._due = False
        self._in_flight: tuple | None = None  # (result ref, weights ref, Taken)
        self._evaluator_back = None  # after a loss: a ref answered once the evaluator is up again

    @property
    def pending(self):
        """The running evaluation's result ref, or None."""
        return self._in_flight[0] if self._in_flight else None

    def on_epoch(self) -> None:
        """Note an epoch: the learner published weights."""
        self.new_weights = True

    def on_env_steps(self, env_steps: int) -> None:
        """Note the run's env steps (each poll): an evaluation is due at every every_env_steps mark
        passed, and every every_s seconds. The first mark is the first after the count the run
        started from (a resumed run's too)."""
        self.env_steps = env_steps
        if self._next_mark is None:
            self._next_mark = mark_after(env_steps, self.every_env_steps)
        now = self.clock()
        if env_steps >= self._next_mark or (self.every_s is not None and now - self._due_at_s >= self.every_s):
            self._due, self._due_at_s = True, now
            self._next_mark = mark_after(env_steps, self.every_env_steps)

    def maybe_start(self) -> None:
        """Start the due evaluation on the newest weights, if none is running and there are new ones."""
        if self._due and self._in_flight is None and self.new_weights and self._evaluator_up(timeout_s=0):
            self._start(self.newest_weights())
            self._due, self.new_weights = False, False

    def _start(self, weights_ref) -> None:
        record = self.video_every > 0 and self.started % self.video_every == 0
        give_up = self.give_up if self.started % FULL_EVAL_EVERY and not record else None
        self.started += 1
        self._in_flight = (self.rt.call(self.evaluator, "evaluate", weights_ref, give_up, record),
                           weights_ref, Taken(self.clock(), self.env_steps))

    def take(self) -> tuple[dict | None, object, Taken]:
        """(result, weights ref, when it took them) of the finished evaluation (call once `pending`
        is ready); the result is None when the evaluator died during it, or the learner before
        handing over its weights."""
        result_ref, weights_ref, taken = self._in_flight
        self._in_flight = None
        return self._result(result_ref), weights_ref, taken

    def evaluate_now(self, weights_ref) -> dict | None:
        """Evaluate `weights_ref` to the end and wait for it (the run's final evaluation), recording
        its first episode when videos are asked for and no evaluation recorded one (a short run's
        evaluator may have come up too late for any); None when the evaluator died during it, or
        the learner had no weights to give."""
        self._evaluator_up(timeout_s=EVALUATOR_BACK_S)
        record = self.video_every > 0 and not self.recorded
        return self._result(self.rt.call(self.evaluator, "evaluate", weights_ref, None, record))

    def _evaluator_up(self, timeout_s: float) -> bool:
        """Whether the evaluator answers calls: False while Ray still restarts it after a loss."""
        if self._evaluator_back is not None:
            if not self.rt.wait([self._evaluator_back], timeout=timeout_s):
                return False
            self._evaluator_back = None
        return True

    def _result(self, result_ref) -> dict | None:
        try:
            result = self.rt.get(result_ref)
        except self.rt.errors.lost:  # the evaluator died during it, or the node holding its weights did
            result = None
        except self.rt.errors.raised as err:
            # the weights were asked of a learner Ray had just restarted, which refuses until the
            # driver revives it: this evaluation is lost, the next waits for the revived one's weights
            if not refused_by_a_restarted_learner(err):
                raise
            result = None
        if result is None:
            self.lost += 1
            self._evaluator_back = self.rt.when_up(self.evaluator)
        elif "video" in result:  # counted once it came back: one still running when the run ends may never
            self.recorded = True
        return result

    def forget_weights(self) -> None:
        """The learner died: wait for its replacement's first epoch before the next evaluation."""
        self.new_weights = False
