"""`raypex train`: validate the config, make the run directory, then hand over to TrainingRun.

Order matters for "nothing half-written": the config and the run directory are checked first;
then the directory is made and the run starts in it (env check, the runtime's start: Ray connected
and the placement groups reserved, every node's versions checked on a joined cluster). A mistake
found during that start (an env raypex cannot train, an address that does not answer, a cluster
too small, a checkpoint the learner refuses) puts the directory back as it was and is one line. A
signal at any moment from the run directory on ends the run as a stop does, with summary.json:
the run's modules are imported after the directory is made, and a signal until the run begins is
raised as soon as it does (cluster/driver/signals.py `hold`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from cluster.commands.run_dir import check_resume, check_writable, kept_policy
from cluster.commands.usage import UsageError, default_run_dir, split_positional
from cluster.config.loading import (
    ConfigError,
    apply_overrides,
    config_to_yaml,
    drop_retired_keys,
    load_config,
    read_yaml,
    validate,
)
from cluster.config.schema import RunConfig, config_warnings
from cluster.driver.address import ADDRESS_VARIABLE, kept_up_address, ray_job_address
from cluster.driver.checkpoints import OutputNotWritten, ResumePoint, atomic_write
from cluster.driver.progress import ProgressLine
from cluster.driver.run_errors import CheckpointRefused, RunFailed, StartRefused
from cluster.driver.signals import hold, install_stop_signals, stop_holding


def resolve_config(args: argparse.Namespace, warn: Callable[[str], None]) -> tuple[RunConfig, Path, ResumePoint | None]:
    """(config, run dir, resume point or None) from the arguments; UsageError on any mistake,
    with nothing written (cluster/commands/run_dir.py checks the directory)."""
    config_path, overrides = split_positional(args.args)
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    if getattr(args, "local", False):
        overrides.append("runtime=local")
    try:
        if args.resume is not None:
            if config_path is not None or args.run_dir is not None:
                raise UsageError("--resume RUN_DIR takes the config from RUN_DIR; give no CONFIG or --run-dir")
            saved_path = args.resume / "config.yaml"
            if not saved_path.is_file():
                raise UsageError(f"--resume {args.resume}: no config.yaml there (not a raypex run directory)")
            saved = drop_retired_keys(read_yaml(saved_path))
            config = validate(apply_overrides(saved, overrides))
            return config, args.resume, check_resume(args.resume, validate(saved), config, warn)
        config = load_config(config_path, overrides)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    run_dir = args.run_dir if args.run_dir is not None else default_run_dir(config.env.id, config.seed)
    if run_dir.is_dir() and any(run_dir.iterdir()):
        raise UsageError(f"--run-dir {run_dir} already holds files; choose a new directory or use --resume {run_dir}")
    check_writable(run_dir, "--run-dir")
    return config, run_dir, None


def run_train(args: argparse.Namespace, clock_start: float) -> int:
    """The whole `raypex train` command; returns the exit code."""
    progress = ProgressLine(sys.stderr)
    config, run_dir, resume = resolve_config(args, lambda line: progress.message(f"warning: {line}"))
    try:
        code, _ = launch(config, run_dir, resume, args.address, clock_start, progress)
    except RunFailed as err:
        print(f"raypex: run failed: {err}; continue it with: raypex train --resume {run_dir}", file=sys.stderr)
        return 1
    except OutputNotWritten as err:  # before the run began (config.yaml on a full disk)
        print(f"raypex: error: {err}", file=sys.stderr)
        return 1
    return code


def launch(config: RunConfig, run_dir: Path, resume: ResumePoint | None, address: str | None, clock_start: float,
           progress: ProgressLine, observers: tuple = ()) -> tuple[int, dict]:
    """Make the run directory and run in it to the end, on the runtime `config.runtime` names (Ray:
    a local cluster unless `address`); (exit code, summary). UsageError, the directory put back,
    for a mistake found while the run starts; RunFailed (after the final files) when a part died
    past recovery. `raypex train` and the Python API (cluster/api.py) both start runs here."""
    install_stop_signals()
    for warning in config_warnings(config):
        progress.message(f"warning: {warning}")
    found_config = (run_dir / "config.yaml").read_bytes() if resume else None
    made = next((path for path in [*reversed(run_dir.parents), run_dir] if not path.exists()), None)
    run_dir.mkdir(parents=True, exist_ok=True)
    hold()  # from here a signal ends the run with summary.json: it is raised once the run has begun
    try:
        config_text = config_to_yaml(config)
        atomic_write(run_dir / "config.yaml", config_text.encode())
        # Imported after the run directory is made (Ray, gymnasium, TensorBoard: half a second
        # here), so that a signal while they load is the run's to end.
        runtime = choose_runtime(config, address, progress)
        from actors.envs import UnsupportedEnv
        from cluster.driver.run import TrainingRun

        run = TrainingRun(config, None, run_dir, runtime, clock_start, progress, resume, observers=observers,
                          kept_policy=kept_policy(run_dir) if resume else None)
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
    progress.message(_summary_line(summary, run_dir))
    return code, summary


def choose_runtime(config: RunConfig, address: str | None, progress: ProgressLine):
    """The runtime the config names: the local one, or Ray's on the cluster `address` names (else
    RAYPEX_ADDRESS's, else the job's inside `ray job submit`, else a local cluster of its own)."""
    if config.runtime == "local":
        if address is not None:
            raise UsageError("--address joins a Ray cluster; runtime local runs without Ray (drop one of them)")
        from cluster.local.runtime import LocalRuntime

        return LocalRuntime()
    from cluster.driver.ray_runtime import RayRuntime

    ship_code = True
    from_variable = address is None and (address := kept_up_address()) is not None
    if from_variable:
        progress.message(f"{ADDRESS_VARIABLE}: joining the Ray cluster at {address}")
    elif address is None and (address := ray_job_address()) is not None:
        progress.message(f"inside a Ray job: joining its cluster at {address}")
        ship_code = False  # the job's own working directory (ray job submit --working-dir) is the actors' already
    return RayRuntime(address, ship_code, from_variable)


def _put_back(run_dir: Path, found_config: bytes | None, made: Path | None) -> None:
    """The run directory as it was before the command: a resumed run's config.yaml as found; else
    the directories this command made removed (`made`: the first of them), an empty one emptied."""
    if found_config is not None:
        atomic_write(run_dir / "config.yaml", found_config)
        return
    shutil.rmtree(made or run_dir, ignore_errors=True)
    if made is None:
        run_dir.mkdir()


def _summary_line(summary: dict, run_dir: Path) -> str:
    solve = summary["time_to_solve_s"]
    solved = f"solved in {solve:.1f}s" if solve is not None else "not solved"
    final = summary["final_eval_return"]
    final_text = "-" if final is None else f"{final:.1f}"
    wrote = " and ".join(str(run_dir / name) for name in ("summary.json", "policy.pt2") if (run_dir / name).is_file())
    return (f"done: {summary['env_steps']} env steps in {summary['wall_s']:.1f}s, {solved}, "
            f"final eval return {final_text}; wrote {wrote or 'nothing'}")


