"""raypex from Python: start a run from a notebook or a sweep script and get its results back.

    from raypex.cluster.api import train
    result = train("cartpole", {"stop.env_steps": 30000}, seed=1)
    result.summary["final_eval_return"], result.run_dir, result.policy.act(obs)

`train` starts its run through `launch` (cluster/launch.py), as `raypex train` does. A run
started here is the run `raypex train` makes: the same checks (one-line `UsageError` for a
mistake, before anything is written), the same run directory, TensorBoard, checkpoints and
policy.pt2; a local Ray cluster unless `address` is given, shut down when the run ends. Ctrl-C
(a notebook's interrupt) takes the clean stop path and the result says `ended: interrupted`.
With `block=False` the run goes on in a thread and `train` returns a `RunningRun` to poll, wait
for or stop. Only one run at a time per process: Ray is one connection per process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from raypex.cluster.config.arguments import UsageError, default_run_dir, split_positional
from raypex.cluster.config.loading import (
    ConfigError,
    ConfigOrigin,
    apply_overrides,
    apply_values,
    config_origin,
    read_yaml,
    saved_run_config,
    validate,
)
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.driver.observer import RunObserver
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.run_dir import check_writable, open_remote
from raypex.cluster.driver.run_errors import RunFailed
from raypex.cluster.launch import launch, open_resumed
from raypex.cluster.storage import atomic_write, is_uri, join, name_of, reason, remote

if TYPE_CHECKING:  # Ray and the run's modules load once the run directory exists (see `launch`)
    from raypex.cluster.driver.run import TrainingRun

__all__ = ["EvalResult", "RunFailed", "RunResult", "RunningRun", "UsageError", "evaluate", "load_policy",
           "resolve_run_config", "train"]

EpochCallback = Callable[[dict[str, Any]], None]
EvalCallback = Callable[[dict[str, Any]], None]
StopCallback = Callable[[dict[str, Any]], bool]


def load_policy(path: str | Path):
    """The exported greedy policy of a run (`RUN_DIR/policy.pt2`, or the run directory itself; a
    local path or a URI)."""
    from raypex.learner.policy_file import load_policy as load

    if is_uri(str(path)):
        return _load_remote_policy(str(path))
    path = Path(path)
    return load(path / "policy.pt2" if path.is_dir() else path)


def _load_remote_policy(uri: str):
    """The policy at `uri` (a run directory's, or a policy.pt2's), fetched to a temporary file."""
    import tempfile

    from raypex.learner.policy_file import load_policy as load

    location = uri if name_of(uri).endswith(".pt2") else join(uri, "policy.pt2")
    with tempfile.TemporaryDirectory(prefix="raypex-policy-") as local:
        target = Path(local) / "policy.pt2"
        try:
            filesystem, path = remote(location)
            with filesystem.open_input_stream(path) as source:
                target.write_bytes(source.read())
        except OSError as err:
            raise UsageError(f"{location}: no policy.pt2 could be read there ({reason(err)})") from None
        return load(target)


@dataclass(frozen=True)
class EvalResult:
    """Returns of a policy's evaluation episodes (undiscounted, one per episode)."""

    returns: np.ndarray  # one undiscounted return per episode, in the order the episodes were played
    video: Path | None = None  # the first episode as an animated PNG, when asked for and the env has pictures
    cut: int = 0  # episodes stopped at max_episode_steps steps (the run's eval.max_episode_steps), scored so far
    max_episode_steps: int | None = None  # that cap

    @property
    def mean(self) -> float:
        """The mean return over the episodes."""
        return float(self.returns.mean())

    def line(self) -> str:
        """What `raypex eval` prints (one precision for all four: a mean of 0.95 beside a min of 0.9
        once read as if the mean were out of range)."""
        r = self.returns
        cut = (f"; {self.cut} of them stopped at eval.max_episode_steps, {self.max_episode_steps:,} steps, "
               "scored so far") if self.cut else ""
        return (f"mean return {r.mean():.2f} over {len(r)} episodes "
                f"(min {r.min():.2f}, max {r.max():.2f}, std {r.std():.2f}{cut})")


def _best_trial(directory: Path) -> Path:
    """The run directory of a sweep's best trial when `directory` is a sweep's experiment
    directory (its results.json names the best trial), else `directory` itself."""
    results = directory / "results.json"
    if (directory / "config.yaml").is_file() or not results.is_file():
        return directory
    try:
        best = json.loads(results.read_text()).get("best") or {}
    except (OSError, ValueError) as err:
        raise UsageError(f"{results}: not a sweep's results ({err})") from None
    if not isinstance(best, dict) or not isinstance(best.get("trial"), str):
        raise UsageError(f"{directory}: a sweep with no best trial yet (results.json names none)")
    return directory / "trials" / best["trial"]


def evaluate(run_dir: str | Path, episodes: int = 100, *, epsilon: float | None = None, seed: int = 12345,
             video: str | Path | None = None) -> EvalResult:
    """Play `episodes` episodes of a run's policy.pt2 in its env (each in its own env of one vector
    env; `run_dir` may also name the policy.pt2 of a run or of a sweep's experiment), greedily, or
    with `epsilon` random actions (default: the run's eval.epsilon); `video`: a path for the first
    episode as an animated PNG. Works from any directory, your own env's code
    included (found where the run was started: env.code_dir). UsageError, in one line, for a run
    directory without a readable policy or config, or an env that cannot be built."""
    if is_uri(run_dir):  # its files but the replay, fetched to a local copy for as long as it takes
        remote = open_remote(str(run_dir), "RUN_DIR", resume=True)
        try:
            return evaluate(remote.copy, episodes, epsilon=epsilon, seed=seed, video=video)
        finally:
            remote.close()
    run_dir = Path(run_dir).resolve()
    if episodes < 1:
        raise UsageError(f"episodes (--episodes) must be >= 1, got {episodes}")
    policy_path = None
    if run_dir.is_file() and run_dir.suffix == ".pt2":  # a run's (or a sweep's) policy.pt2 itself
        policy_path, run_dir = run_dir, run_dir.parent
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")
    run_dir = _best_trial(run_dir)
    policy_path = policy_path or run_dir / "policy.pt2"
    if not policy_path.is_file():
        raise UsageError(f"{run_dir}: no policy.pt2 (the run has not finished, or this is not a run directory)")
    try:
        config = saved_run_config(run_dir)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    if epsilon is not None and not 0.0 <= epsilon <= 1.0:
        raise UsageError(f"epsilon (--epsilon) must be within [0, 1], got {epsilon}")

    import torch

    from raypex.actors.envs import UnsupportedEnv, inspect_env
    from raypex.actors.evaluator import Evaluator
    from raypex.learner.policy_file import PolicyFileError

    torch.set_num_threads(1)
    try:
        policy = load_policy(policy_path)
    except PolicyFileError as err:
        raise UsageError(str(err)) from None
    env = config.env
    eps = config.eval.epsilon if epsilon is None else epsilon
    with _in_directory(env.code_dir):  # a module:Name or relative file.py:Name resolves as it did in training
        try:
            # frames stacked by raypex (pixel envs) give the video's pictures
            stacked = video is not None and inspect_env(env.id, env.kwargs, env.frame_stack, env.wrappers).frame_stack > 0
            evaluator = Evaluator(env.id, env.kwargs, episodes, seed, env.frame_stack, eps, stacked, tuple(env.wrappers),
                                  max_episode_steps=config.eval.max_episode_steps)
        except UnsupportedEnv as err:
            raise UsageError(str(err), err.details) from None
        try:
            returns = evaluator.evaluate(policy.episodes_actor(episodes), record=video is not None)
        finally:
            evaluator.close()
    written = None
    if video is not None and evaluator.video is not None:
        written = Path(video)
        atomic_write(written, evaluator.video.data)
    return EvalResult(returns, written, evaluator.cut, config.eval.max_episode_steps)


@contextlib.contextmanager
def _in_directory(path: str | None):
    """Work in `path` (when it is an existing directory) for the duration."""
    if path is None or not Path(path).is_dir():
        yield
        return
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


@dataclass
class RunResult:
    """What a finished run left: its directory, summary.json's fields and the exit code `raypex
    train` would have returned (0; 130 after Ctrl-C)."""

    run_dir: Path | str  # a str when it is a URI
    summary: dict[str, Any]  # summary.json's fields (docs/reference/run-directory.md lists them)
    exit_code: int = 0  # what `raypex train` would exit with: 0, or 130 after Ctrl-C
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


def run_config_origin(config: str | Path | Mapping | RunConfig, overrides: Mapping[str, Any] | list[str] | None
                      ) -> ConfigOrigin | None:
    """What `config` was written for (None for a RunConfig: taken as the caller's own, already fitted)."""
    if isinstance(config, RunConfig):
        return None
    given = dict(overrides) if isinstance(overrides, Mapping) else list(overrides or [])
    if isinstance(config, Mapping):
        return config_origin("the given config", dict(config), given)
    path, _ = split_positional([str(config)])
    return config_origin(f"the {path.stem} config" if path else "the default config",
                         read_yaml(path) if path else {}, given)


class _Watcher(RunObserver):
    """Hands epochs and evaluations to the callbacks; ends the run when asked (RunningRun.stop) or
    when `stop_when` says so, as a stop.* key does (`ended: stopped`, exit code 0). A callback that
    raises is called no more, and the run fails at its next poll (RunFailed naming the callback,
    after the final files, as when a part dies); one raising once the run is ending fails the call
    after the run's files are written."""

    def __init__(self, on_epoch: EpochCallback | None, on_eval: EvalCallback | None = None,
                 stop_when: StopCallback | None = None):
        self.callbacks = {"on_epoch": on_epoch, "on_eval": on_eval, "stop_when": stop_when}
        self.stop_asked = threading.Event()
        self.failure: RunFailed | None = None  # what a callback raised, said as the run's failure

    def _call(self, name: str, argument: dict[str, Any]) -> Any:
        callback = self.callbacks[name]
        if callback is None or self.failure is not None:
            return None
        try:
            return callback(argument)
        except Exception as err:  # noqa: BLE001 - the user's code: the run ends, its files written
            import traceback

            self.failure = RunFailed(f"the {name} callback raised {type(err).__name__}: {err}",
                                     traceback.format_exc())
            self.failure.__cause__ = err
            return None

    def after_epoch(self, run: TrainingRun, epoch: int, scalars: dict[str, float]) -> None:
        self._call("on_epoch", {"epoch": epoch, "env_steps": run.metrics.env_steps,
                                "wall_s": time.time() - run.clock_start, **scalars})

    def after_evaluation(self, run: TrainingRun, result: dict) -> None:
        self._call("on_eval", {"env_steps": run.metrics.env_steps, "wall_s": time.time() - run.clock_start,
                               "weights_version": result["version"], "return_mean": result["mean"],
                               "return_min": result["min"]})

    def after_poll(self, run: TrainingRun) -> None:
        if run.outcome.ended is not None:
            return
        if self.stop_asked.is_set() or self._call("stop_when", self._standing(run)):
            run.end_soon("stopped")
        if self.failure is not None:
            raise self.failure

    @staticmethod
    def _standing(run: TrainingRun) -> dict[str, Any]:
        """Where the run stands at a poll: what `stop_when` decides on."""
        m = run.metrics
        return {"env_steps": m.env_steps, "wall_s": time.time() - run.clock_start, "epochs": run.epochs_done,
                "episode_return": m.last_return, "eval_return": m.last_eval}


class RunningRun:
    """A run going on in a thread (`train(..., block=False)`)."""

    def __init__(self, run_dir: Path | str, watcher: _Watcher, thread_target: Callable[[], RunResult]):
        self.run_dir = run_dir  # where the run writes (a str when it is a URI)
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


def train(config: str | Path | Mapping | RunConfig | None = None,
          overrides: Mapping[str, Any] | list[str] | None = None, *, seed: int | None = None,
          run_dir: str | Path | None = None, resume: str | Path | None = None, address: str | None = None,
          on_epoch: EpochCallback | None = None, on_eval: EvalCallback | None = None,
          stop_when: StopCallback | None = None, block: bool = True) -> RunResult | RunningRun:
    """Train as `raypex train` does and return the RunResult (or, with `block=False`, a
    RunningRun at once). `config`: a YAML path, a shipped config's name, a mapping shaped like the
    YAML, or a RunConfig (default: cartpole's). `resume`: a run directory (or its URI) to continue
    from its newest checkpoint, as `raypex train --resume` does; its config is the run's own,
    `overrides` applied, so give no `config` or `run_dir` with it.

    Callbacks run on the thread that runs the driver: `on_epoch` gets each epoch's metrics (epoch,
    env_steps, wall_s and the TensorBoard scalars); `on_eval` each finished evaluation's
    (env_steps, wall_s, weights_version, return_mean, return_min); `stop_when`, at every poll of the
    run (a few times a second), where the run stands (env_steps, wall_s, epochs, episode_return,
    eval_return: the newest, None before the first) and ends the run cleanly when it returns True,
    as a stop.* key does (`ended: stopped`, exit code 0). UsageError for a mistake in the config, env
    or run directory; RunFailed when an actor died past recovery (the run directory holds its final
    files and the summary)."""
    clock_start = time.time()
    progress = ProgressLine(sys.stderr)
    if resume is not None:
        if config is not None or run_dir is not None:
            raise UsageError("resume=RUN_DIR takes the config from RUN_DIR; give no config or run_dir")
        resolved, run_path, resume_point, remote = open_resumed(
            str(resume), overrides, seed, lambda line: progress.message(f"warning: {line}"))
        origin = None
    else:
        config = "cartpole" if config is None else config
        resolved = resolve_run_config(config, overrides, seed)
        origin, resume_point = run_config_origin(config, overrides), None
        remote = open_remote(str(run_dir), "run_dir", resume=False) if run_dir is not None and is_uri(run_dir) else None
        if remote is not None:  # the driver works on a local copy, uploaded as it goes
            run_path = remote.copy
        else:
            run_path = Path(run_dir) if run_dir is not None else default_run_dir(resolved.env.id, resolved.seed)
            if run_path.is_dir() and any(run_path.iterdir()):
                raise UsageError(f"run_dir {run_path} already holds files; choose a new directory or resume it")
            check_writable(run_path, "run_dir")
    watcher = _Watcher(on_epoch, on_eval, stop_when)

    def go() -> RunResult:
        if not _one_run.acquire(blocking=False):
            raise UsageError("another raypex run is going on in this process; wait for it or stop it first")
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            code, summary = launch(resolved, run_path, resume_point, address, clock_start, progress, (watcher,),
                                   origin, remote=remote)
            if watcher.failure is not None:  # a callback raised once the run was ending: launch returned all the same
                raise watcher.failure
            return RunResult(remote.uri if remote else run_path, summary, code)
        finally:
            _one_run.release()
            if remote is not None:
                remote.close()
            if threading.current_thread() is threading.main_thread():
                for sig, handler in handlers.items():  # the caller's own (a notebook's Ctrl-C) again
                    signal.signal(sig, handler)

    if block:
        return go()
    return RunningRun(remote.uri if remote else run_path, watcher, go)
