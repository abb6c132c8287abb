"""The seam between the run loop and where a run's parts live.

The run loop (cluster/driver/run.py: start the parts, train epochs, publish weights, evaluate,
checkpoint, revive, stop) is written once against this interface. Two runtimes implement it:
- the Ray runtime (cluster/ray_runtime/runtime.py), the default: every part an actor on a local Ray
  cluster started for the run or on a joined one, weights in the object store;
- the local runtime (cluster/local/runtime.py, `raypex train --local`): the same collector,
  replay, learner and evaluator objects in the driver's own process, no Ray imported.

The loop asks a part for something with `call(part, "method", *args)`, which gives a pending
result; `wait` says which pending results are ready, `get` gives them. With Ray a call runs in
the part's process while the loop goes on; locally it has run by the time `call` returns, so
every pending result is ready. `errors` names the exceptions that mean a part died, was being
restarted or raised (in one process, only the last).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class RuntimeErrors:
    """The exception types a runtime raises for its parts (empty tuples: it never does)."""

    any: tuple = ()  # every error of the runtime or of a part it hosts
    died: tuple = ()  # the part a call went to died (`err.actor_id` says which)
    restarting: tuple = ()  # the part is being restarted: a call now fails at once
    lost: tuple = ()  # the call's result died with a part, or with the node that held it
    raised: tuple = ()  # the part raised; the runtime wraps it (`err.cause` is the part's exception)


class RunParts(Protocol):
    """Handles of everything a run started (RunActors in the Ray runtime, LocalParts in the local one)."""

    collectors: list
    learner: Any
    evaluator: Any
    collector_history: list  # collectors.num auto: where each collector ran, from when to when (placement.json)

    def kill_all(self) -> None: ...

    def role_of(self, actor_id: str | None) -> str: ...

    def placement(self) -> dict: ...


class Runtime(Protocol):
    """Where a run's parts live, and how the run loop waits for what it asked of them."""

    errors: RuntimeErrors
    polls_every_epoch: bool  # the loop polls after each epoch (parts in step with it), else every few seconds

    def start(self, config, spec, progress, startup, env_steps_done: int = 0) -> RunParts:
        """Make the parts of the run (connecting to a cluster first where there is one);
        `env_steps_done`: the run's env steps before this command (a resumed run's)."""

    def call(self, part, method: str, *args, retried: bool = False):
        """Ask `part` (a handle of RunParts) to run `method(*args)`; its pending result. A pending
        result among `args` is given to the method as its value. `retried`: a call that finds the
        part being restarted is made again once it is back, rather than failing at once."""

    def when_up(self, part):
        """A pending result that is ready once `part` takes calls again (after a restart)."""

    def wait(self, pending: list, num_returns: int = 1, timeout: float | None = None) -> list:
        """Those of `pending` that are ready (at least `num_returns`, unless `timeout` passed first)."""

    def get(self, pending, timeout: float | None = None):
        """The result of one pending call, or a list's results."""

    def supervisor(self, parts: RunParts, progress, reported_env_steps):
        """The keeper of the collectors' loops (CollectorSupervisor's interface);
        `reported_env_steps(i)`: the env steps collector i last reported."""

    def close(self) -> None:
        """End every part for good and leave (a local cluster started for the run is shut down)."""
