"""raypex from Python: start a run from a notebook or a sweep script and get its results back.

    from cluster.api import train
    result = train("cartpole", {"stop.env_steps": 30000}, seed=1)
    result.summary["final_eval_return"], result.run_dir, result.policy.act(obs)

A run started here is the run `raypex train` makes: the same checks (one-line `UsageError` for a
mistake, before anything is written), the same run directory, TensorBoard, checkpoints and
policy.pt2; a local Ray cluster unless `address` is given, shut down when the run ends. Ctrl-C
(a notebook's interrupt) takes the clean stop path and the result says `ended: interrupted`.
With `block=False` the run goes on in a thread and `train` returns a `RunningRun` to poll, wait
for or stop. Only one run at a time per process: Ray is one connection per process.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.commands.run_dir import check_writable
from cluster.commands.usage import UsageError, default_run_dir, split_positional
from cluster.config.loading import ConfigError, apply_overrides, apply_values, read_yaml, validate
from cluster.config.schema import RunConfig
from cluster.driver.observer import RunObserver
from cluster.driver.progress import ProgressLine
from cluster.driver.run import TrainingRun
from cluster.driver.run_errors import RunFailed

__all__ = ["RunFailed", "RunResult", "RunningRun", "UsageError", "load_policy", "resolve_run_config", "train"]

EpochCallback = Callable[[dict[str, Any]], None]


def load_policy(path: str | Path):
    """The exported greedy policy of a run (`RUN_DIR/policy.pt2`, or the run directory itself)."""
    from learner.policy_file import load_policy as load

    path = Path(path)
    return load(path / "policy.pt2" if path.is_dir() else path)


@dataclass
class RunResult:
    """What a finished run left: its directory, summary.json's fields and the exit code `raypex
    train` would have returned (0; 130 after Ctrl-C)."""

    run_dir: Path
    summary: dict[str, Any]
    exit_code: int = 0
    _policy: Any = field(default=None, repr=False)

    @property
    def ended(self) -> str:
        """How the run ended: solved, env_steps, interrupted, stopped, ..."""
        return self.summary["ended"]

    @property
    def solved(self) -> bool:
        """Whether an evaluation reached stop.eval_return."""
        return self.summary.get("time_to_solve_s") is not None

    @property
    def policy(self):
        """The exported policy (policy.pt2), loaded on first use: `.act(observations)`."""
        if self._policy is None:
            self._policy = load_policy(self.run_dir)
        return self._policy


def resolve_run_config(config: str | Path | Mapping | RunConfig = "cartpole",
                       overrides: Mapping[str, Any] | list[str] | None = None, seed: int | None = None) -> RunConfig:
    """A validated RunConfig from a YAML path, a shipped config's name, a mapping shaped like the
    YAML, or a RunConfig; `overrides` as {"learner.lr": 1e-3} or ["learner.lr=1e-3"]."""
    try:
        if isinstance(config, RunConfig):
            data = config.model_dump(mode="json")
        elif isinstance(config, Mapping):
            data = dict(config)
        else:
            path, _ = split_positional([str(config)])
            data = read_yaml(path) if path is not None else {}
        if isinstance(overrides, Mapping):
            data = apply_values(data, dict(overrides))
        elif overrides:
            data = apply_overrides(data, list(overrides))
        if seed is not None:
            data = apply_values(data, {"seed": seed})
        return validate(data)
    except ConfigError as err:
        raise UsageError(str(err)) from None


class _Watcher(RunObserver):
    """Hands each epoch to the callback and ends the run when asked (RunningRun.stop)."""

    def __init__(self, on_epoch: EpochCallback | None):
        self.on_epoch = on_epoch
        self.stop_asked = threading.Event()

    def after_epoch(self, run: TrainingRun, epoch: int, scalars: dict[str, float]) -> None:
        if self.on_epoch is not None:
            self.on_epoch({"epoch": epoch, "env_steps": run.metrics.env_steps,
                           "wall_s": time.time() - run.clock_start, **scalars})

    def after_poll(self, run: TrainingRun) -> None:
        if self.stop_asked.is_set() and run.outcome.ended is None:
            run.end_soon("stopped")


class RunningRun:
    """A run going on in a thread (`train(..., block=False)`)."""

    def __init__(self, run_dir: Path, watcher: _Watcher, thread_target: Callable[[], RunResult]):
        self.run_dir = run_dir
        self._watcher = watcher
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(thread_target,), name="raypex-run", daemon=True)
        self._thread.start()

    def _run(self, target: Callable[[], RunResult]) -> None:
        try:
            self._result = target()
        except BaseException as err:  # noqa: BLE001 - handed to whoever waits, raised there
            self._error = err

    def done(self) -> bool:
        """Whether the run has ended (its final files written)."""
        return not self._thread.is_alive()

    def stop(self) -> None:
        """End the run as stop.env_steps would: final checkpoint, summary, policy (`ended: stopped`)."""
        self._watcher.stop_asked.set()

    def wait(self, timeout_s: float | None = None) -> RunResult:
        """The result once the run has ended; TimeoutError if it is still going after `timeout_s`.
        Raises what the run raised (RunFailed, UsageError)."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"the run in {self.run_dir} is still going after {timeout_s}s")
        if self._error is not None:
            raise self._error
        return self._result


_one_run = threading.Lock()


def train(config: str | Path | Mapping | RunConfig = "cartpole", overrides: Mapping[str, Any] | list[str] | None = None,
          *, seed: int | None = None, run_dir: str | Path | None = None, address: str | None = None,
          on_epoch: EpochCallback | None = None, block: bool = True) -> RunResult | RunningRun:
    """Train as `raypex train` does and return the RunResult (or, with `block=False`, a
    RunningRun at once). `on_epoch` gets each epoch's metrics as a dict (epoch, env_steps, wall_s
    and the TensorBoard scalars), on the thread that runs the driver. UsageError for a mistake in
    the config, env or run directory; RunFailed when an actor died past recovery (the run
    directory holds its final files and the summary)."""
    clock_start = time.time()
    resolved = resolve_run_config(config, overrides, seed)
    run_path = Path(run_dir) if run_dir is not None else default_run_dir(resolved.env.id, resolved.seed)
    if run_path.is_dir() and any(run_path.iterdir()):
        raise UsageError(f"run_dir {run_path} already holds files; choose a new directory")
    check_writable(run_path, "run_dir")
    watcher = _Watcher(on_epoch)

    def go() -> RunResult:
        from cluster.commands.train import launch

        if not _one_run.acquire(blocking=False):
            raise UsageError("another raypex run is going on in this process; wait for it or stop it first")
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            code, summary = launch(resolved, run_path, None, address, clock_start, ProgressLine(sys.stderr), (watcher,))
            return RunResult(run_path, summary, code)
        finally:
            _one_run.release()
            if threading.current_thread() is threading.main_thread():
                for sig, handler in handlers.items():  # the caller's own (a notebook's Ctrl-C) again
                    signal.signal(sig, handler)

    if block:
        return go()
    return RunningRun(run_path, watcher, go)
