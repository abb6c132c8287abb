"""Where every run starts: `raypex train`, the Python API (cluster/api.py) and Tune's trials all
call `launch`, which makes the run directory, fits the config to the env, picks the runtime and
runs to the end; `open_resumed` reads what a resumed run continues from. A mistake found while the
run starts is one-line UsageError with the run directory put back as it was."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raypex.cluster.config.arguments import UsageError
from raypex.cluster.config.loading import (
    ConfigError,
    ConfigOrigin,
    apply_overrides,
    apply_values,
    config_to_yaml,
    read_yaml,
    saved_config_upgraded,
    validate,
)
from raypex.cluster.config.schema import RunConfig, config_warnings
from raypex.cluster.driver.checkpoints import ResumePoint
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.run_dir import check_resume, kept_policy, open_remote
from raypex.cluster.driver.run_errors import CheckpointRefused, StartRefused
from raypex.cluster.driver.signals import hold, install_stop_signals, stop_holding
from raypex.cluster.ray_runtime.address import ADDRESS_VARIABLE, kept_up_address, ray_job_address
from raypex.cluster.storage import atomic_write, is_uri, join

if TYPE_CHECKING:
    from raypex.cluster.driver.remote_run import RemoteRun


def open_resumed(resume: str, overrides: Mapping[str, Any] | list[str] | None, seed: int | None,
                 warn: Callable[[str], None]) -> tuple[RunConfig, Path, ResumePoint, RemoteRun | None]:
    """(config, run directory, checkpoint to resume from, the RemoteRun when `resume` is a URI: then
    the run directory is its local copy) for continuing the run in `resume`: its saved config with
    `overrides` ({"key": value} or ["key=value"]) and `seed`; UsageError, nothing changed, when it
    cannot be continued so."""
    remote = open_remote(resume, "--resume", resume=True) if is_uri(resume) else None
    run_dir = remote.copy if remote else Path(resume)
    saved_path = run_dir / "config.yaml"
    try:
        if not run_dir.is_dir():
            raise UsageError(f"--resume {resume}: no such directory")
        if not saved_path.is_file():
            raise UsageError(f"--resume {resume}: no config.yaml there (not a raypex run directory)")
        try:
            saved = saved_config_upgraded(read_yaml(saved_path))
            data = apply_values(saved, dict(overrides)) if isinstance(overrides, Mapping) else apply_overrides(
                saved, list(overrides or []))
            config = validate(data if seed is None else apply_values(data, {"seed": seed}))
            point = check_resume(run_dir, validate(saved), config, warn, remote)
        except ConfigError as err:
            raise UsageError(str(err)) from None
    except BaseException:
        if remote is not None:
            remote.close()
        raise
    return config, run_dir, point, remote


def launch(config: RunConfig, run_dir: Path, resume: ResumePoint | None, address: str | None, clock_start: float,
           progress: ProgressLine, observers: tuple = (), origin: ConfigOrigin | None = None,
           runtime=None, remote: RemoteRun | None = None) -> tuple[int, dict]:
    """Make the run directory and run in it to the end, on the runtime `config.runtime` names (Ray:
    a local cluster unless `address`); (exit code, summary). `origin`: what the config was written
    for (cluster/plan/env_fit.py fits it to the env). UsageError, the directory put back, for a
    mistake found while the run starts; RunFailed (after the final files) when a part died past
    recovery. `runtime`: one made by the caller (a Tune trial's, in its placement group), else the
    config's. `remote`: the URI the run directory lives at, `run_dir` its local copy
    (cluster/driver/remote_run.py). `raypex train`, the Python API (here) and Tune trials all start
    runs here."""
    install_stop_signals()
    for warning in config_warnings(config):
        progress.message(f"warning: {warning}")
    found_config = (run_dir / "config.yaml").read_bytes() if resume else None
    made = next((path for path in [*reversed(run_dir.parents), run_dir] if not path.exists()), None)
    run_dir.mkdir(parents=True, exist_ok=True)
    hold()  # from here a signal ends the run with summary.json: it is raised once the run has begun
    try:
        # Imported after the run directory is made (Ray, gymnasium, TensorBoard: half a second
        # here), so that a signal while they load is the run's to end.
        from raypex.actors.envs import UnsupportedEnv
        from raypex.cluster.driver.startup import StartupTimeline
        from raypex.cluster.plan.env_fit import fit_run

        on_this_machine = config.runtime == "local" or joined_address(address)[0] is None
        try:
            config, spec, lines = fit_run(config, origin, on_this_machine)
        except UnsupportedEnv as err:
            raise UsageError(str(err), err.details) from None
        startup = StartupTimeline(clock_start)
        startup.mark("env_checked", time.time())
        for line in lines:
            progress.message(line)
        config_text = config_to_yaml(config)
        atomic_write(run_dir / "config.yaml", config_text.encode())
        runtime = runtime or choose_runtime(config, address, progress)
        from raypex.cluster.driver.run import TrainingRun

        run = TrainingRun(config, spec, run_dir, runtime, clock_start, progress, resume, observers=observers,
                          kept_policy=kept_policy(run_dir) if resume else None, startup=startup, remote=remote)
    except BaseException:  # a mistake (--address with runtime local) or a full disk: nothing half-written
        stop_holding()
        _put_back(run_dir, found_config, made)
        raise
    try:
        code = run.execute(config_text)
    except (UnsupportedEnv, StartRefused, CheckpointRefused) as err:
        _put_back(run_dir, found_config, made)
        if isinstance(err, CheckpointRefused):
            raise UsageError(f"--resume {run_dir}: {err}; nothing in {run_dir} was changed") from None
        raise UsageError(str(err), getattr(err, "details", None)) from None
    written = run_dir / "summary.json"  # what the run wrote at its end is what callers get
    summary = json.loads(written.read_text()) if written.is_file() else run.summary()
    progress.message(_summary_line(summary, run_dir, time.time() - clock_start if resume else None,
                                   remote.uri if remote is not None else None))
    return code, summary


def choose_runtime(config: RunConfig, address: str | None, progress: ProgressLine):
    """The runtime the config names: the local one, or Ray's on the cluster `address` names (else
    RAYPEX_ADDRESS's, else the job's inside `ray job submit`, else a local cluster of its own)."""
    if config.runtime == "local":
        if address is not None:
            raise UsageError("--address joins a Ray cluster; runtime local runs without Ray (drop one of them)")
        from raypex.cluster.local.runtime import LocalRuntime

        return LocalRuntime()
    from raypex.cluster.ray_runtime.runtime import RayRuntime

    address, named_by = joined_address(address)
    if named_by == "variable":
        progress.message(f"{ADDRESS_VARIABLE}: joining the Ray cluster at {address}")
    elif named_by == "job":
        progress.message(f"inside a Ray job: joining its cluster at {address}")
    # inside a job, its own working directory (ray job submit --working-dir) is the actors' already
    return RayRuntime(address, named_by != "job", named_by == "variable")


def joined_address(address: str | None) -> tuple[str | None, str | None]:
    """(the Ray cluster a run joins, what named it: "given", "variable" for RAYPEX_ADDRESS, "job"
    inside `ray job submit`); (None, None): a local cluster of its own, on this machine."""
    if address is not None:
        return address, "given"
    if (address := kept_up_address()) is not None:
        return address, "variable"
    if (address := ray_job_address()) is not None:
        return address, "job"
    return None, None


def _put_back(run_dir: Path, found_config: bytes | None, made: Path | None) -> None:
    """The run directory as it was before the command: a resumed run's config.yaml as found; else
    the directories this command made removed (`made`: the first of them), an empty one emptied."""
    if found_config is not None:
        atomic_write(run_dir / "config.yaml", found_config)
        return
    shutil.rmtree(made or run_dir, ignore_errors=True)
    if made is None:
        run_dir.mkdir()


def _summary_line(summary: dict, run_dir: Path, command_s: float | None = None, uri: str | None = None) -> str:
    """The done line; `command_s`: a resumed run's own time, said beside the run's whole; `uri`:
    where the run directory `run_dir` (then a local copy) was uploaded."""
    solve = summary["time_to_solve_s"]
    solved = f"solved in {solve:.1f}s" if solve is not None else "not solved"
    final = summary["final_eval_return"]
    final_text = "-" if final is None else f"{final:.1f}"
    wrote = " and ".join(join(uri, name) if uri else str(run_dir / name)
                         for name in ("summary.json", "policy.pt2") if (run_dir / name).is_file())
    took = (f"this command {command_s:.1f}s, the run {summary['wall_s']:.1f}s" if command_s is not None
            else f"{summary['wall_s']:.1f}s")
    return (f"done: {summary['env_steps']} env steps in {took}, {solved}, "
            f"final eval return {final_text}; wrote {wrote or 'nothing'}")


