"""The local runtime: a run's parts as plain objects in the driver's own process, no Ray imported
(`raypex train --local`, `runtime: local`; cluster/driver/runtime.py names the interface).

The parts are the local wiring's (cluster/local/wiring.py): the same Collector, ShardedReplay,
LearnerHost and WeightsEvaluator classes the Ray actors host. A call on a part's handle is made
at once, so the loop's epochs, evaluations and checkpoints run one after another; the collectors
collect whenever the replay ratio holds the learner back (lockstep), so on a CPU a seed gives the
same run bit for bit. Nothing here is restarted: a part that raises (a user's env, say) ends the
run as a failed one, its error wrapped (PartRaised, `cause`) for the run loop, which names it in
one line and writes summary.json.
"""

from __future__ import annotations

import os
import time

from raypex.cluster.config.schema import RunConfig
from raypex.cluster.driver.runtime import RuntimeErrors
from raypex.cluster.local.hang_watch import HangWatch
from raypex.cluster.local.wiring import LocalRun, build_local
from raypex.cluster.plan.topology import plan_run


class PartRaised(Exception):
    """A part of a local run raised; `cause` is its exception."""

    def __init__(self, cause: Exception):
        super().__init__(str(cause))
        self.cause = cause


class Done:
    """A call made already: its result, or the exception it raised."""

    def __init__(self, result=None, error: Exception | None = None):
        self.result, self.error = result, error

    def value(self):
        """The call's result (PartRaised for its exception)."""
        if self.error is not None:
            raise PartRaised(self.error) from self.error
        return self.result


def value_of(argument):
    """A call's result in place of the call, as an argument of another."""
    return argument.value() if isinstance(argument, Done) else argument


class LocalParts:
    """Handles of everything a local run built."""

    def __init__(self, run: LocalRun):
        self.run = run
        self.collectors = run.collectors  # the loop asks them for stats() only
        self.learner = run.host
        self.evaluator = run.evaluator
        self.collector_history: list = []  # collectors.num auto's, which a local run never has

    def kill_all(self) -> None:
        """Close every env."""
        for collector in self.run.collectors:
            collector.stepper.close()
        self.run.evaluator.evaluator.close()

    def role_of(self, actor_id: str | None) -> str:
        return "a part of the run"

    def placement(self) -> dict:
        """placement.json: everything in this process."""
        return {"runtime": "local", "pid": os.getpid(), **self.learner_placement(),
                "collectors": [{"collector": i, "collector_node": "local"} for i in range(len(self.collectors))]}

    def learner_placement(self) -> dict:
        """placement.json's learner fields (nothing here is restarted: they never change)."""
        return {"learner_node": "local", "replay_node": "local"}


class LockstepCollectors:
    """The supervisor of collectors that have no loops of their own: they collect when the learner
    waits for data, so there is nothing to start, watch or stop."""

    def __init__(self, count: int):
        self.count = count  # the collectors
        self.gone: set[int] = set()  # none is ever counted out here
        self.absent: set[int] = set()  # nor is any slot without its collector

    def start(self) -> None:
        """Nothing to start."""

    def check(self) -> None:
        """Nothing dies apart from the run."""

    def answering(self) -> list[int]:
        """Every collector: none is ever counted out here."""
        return list(range(self.count))

    def check_env_steps(self, stats: list, timeout_s: float, env_id: str) -> None:
        """Nothing to watch: a step that hangs here hangs this process (the Ray runtime watches)."""

    def check_answers(self, answering: list[int], answered: list[bool], waited_s: float, timeout_s: float,
                      env_id: str) -> None:
        """Every collector here answers at once: it is this process."""

    def stop(self) -> None:
        """Nothing runs between the loop's calls."""

    def wait_stopped(self) -> None:
        """Nothing to wait for."""


class LocalRuntime:
    """Runs the parts in this process."""

    errors = RuntimeErrors(any=(PartRaised,), raised=(PartRaised,))
    # Polled after every epoch, not every few seconds: what a poll decides (the stop, evaluations,
    # checkpoints' counts) then falls at the same epochs whatever the machine's load.
    polls_every_epoch = True

    def __init__(self):
        self.parts: LocalParts | None = None
        self.hang_watch: HangWatch | None = None

    def start(self, config: RunConfig, spec, progress, startup, env_steps_done: int = 0) -> LocalParts:
        """Build the parts here, on the CPU (one torch thread: the collectors share the process),
        their collecting ending at stop.env_steps, and watch their env steps (cluster/local/hang_watch.py)."""
        budget = config.stop.env_steps - env_steps_done
        self.parts = LocalParts(build_local(plan_run(config, spec), env_step_budget=budget))
        run = self.parts.run
        parts = [(f"collector {i}", c.stepper) for i, c in enumerate(run.collectors)] + [("the evaluator", run.evaluator.evaluator)]
        self.hang_watch = HangWatch(parts, config.env.step_timeout_s, config.env.id)
        self.hang_watch.start()
        startup.mark("actors_asked", time.time())
        return self.parts

    def call(self, part, method: str, *args, retried: bool = False) -> Done:
        """Run `part.method(*args)` now (nothing here is restarted, so nothing is retried)."""
        try:
            return Done(getattr(part, method)(*map(value_of, args)))
        except Exception as err:  # noqa: BLE001 - raised again, wrapped, to whoever gets the result
            return Done(error=err)

    def when_up(self, part) -> Done:
        """Ready: a part here never goes down apart from the run."""
        return Done(True)

    def wait(self, pending: list, num_returns: int = 1, timeout: float | None = None) -> list:
        """Every pending result: each call was made already."""
        return list(pending)

    def get(self, pending, timeout: float | None = None):
        """The result, or each result of a list."""
        return [p.value() for p in pending] if isinstance(pending, list) else pending.value()

    def supervisor(self, parts: LocalParts, progress, reported_env_steps) -> LockstepCollectors:
        """Nothing to supervise."""
        return LockstepCollectors(len(parts.collectors))

    def close(self) -> None:
        """Stop watching and close the parts' envs."""
        if self.hang_watch is not None:
            self.hang_watch.stop()
        if self.parts is not None:
            self.parts.kill_all()
