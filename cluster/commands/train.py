"""`raypex train`: validate everything, connect, reserve, then hand over to TrainingRun.

Order matters for "nothing half-written": the config, the env and the run directory are checked
first, then Ray is connected and the placement group reserved (on a joined cluster, every node's
versions checked too); only when all of that succeeded is the run directory created.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from actors.env_ids import code_to_ship
from actors.envs import UnsupportedEnv, check_algo_fits, inspect_env
from cluster.commands.run_dir import check_resume, check_writable, kept_policy
from cluster.commands.usage import UsageError, default_run_dir, split_positional
from cluster.config.loading import ConfigError, apply_overrides, config_to_yaml, load_config, read_yaml, validate
from cluster.config.schema import RunConfig, config_warnings
from cluster.driver.address import ADDRESS_VARIABLE, kept_up_address, ray_job_address
from cluster.driver.checkpoints import OutputNotWritten, ResumePoint, atomic_write
from cluster.driver.progress import ProgressLine
from cluster.driver.run_errors import CheckpointRefused, PlacementError, RunFailed
from cluster.driver.startup import StartupTimeline
from cluster.local.head_start import maybe_head_start


def resolve_config(args: argparse.Namespace, warn: Callable[[str], None]) -> tuple[RunConfig, Path, ResumePoint | None]:
    """(config, run dir, resume point or None) from the arguments; UsageError on any mistake,
    with nothing written (cluster/commands/run_dir.py checks the directory)."""
    config_path, overrides = split_positional(args.args)
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    try:
        if args.resume is not None:
            if config_path is not None or args.run_dir is not None:
                raise UsageError("--resume RUN_DIR takes the config from RUN_DIR; give no CONFIG or --run-dir")
            saved_path = args.resume / "config.yaml"
            if not saved_path.is_file():
                raise UsageError(f"--resume {args.resume}: no config.yaml there (not a raypex run directory)")
            saved = read_yaml(saved_path)
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
    """Check the env, connect to Ray (a local cluster unless `address`), reserve, run to the end;
    (exit code, summary). UsageError for a mistake found before anything is written; RunFailed
    (after the final files) when an actor died past recovery. `raypex train` and the Python API
    (cluster/api.py) both start runs here."""
    try:
        spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
        check_algo_fits(config.algo.name, spec, config.env.id, config.network.obs_norm)
    except UnsupportedEnv as err:
        raise UsageError(str(err), err.details) from None
    startup = StartupTimeline(clock_start)
    startup.mark("env_checked", time.time())
    for warning in config_warnings(config):
        progress.message(f"warning: {warning}")

    code_dir = code_to_ship(config.env.id)
    from_variable = address is None and (address := kept_up_address()) is not None
    if from_variable:
        progress.message(f"{ADDRESS_VARIABLE}: joining the Ray cluster at {address}")
    elif address is None and (address := ray_job_address()) is not None:
        progress.message(f"inside a Ray job: joining its cluster at {address}")
        code_dir = None  # the job's own working directory (ray job submit --working-dir) is the actors' already
    # Before Ray is imported here: the fork shares this process's imports, and Ray's import is 0.4 s.
    head_start = maybe_head_start(config, spec, address is None, resume is not None, progress.message)
    from cluster.driver.address import ConnectError, connect_error_line
    from cluster.driver.devices import choose_act_device, choose_device, with_act_device
    from cluster.driver.run import TrainingRun
    from cluster.driver.versions import VersionMismatch
    from cluster.driver.wiring import (
        check_local_cluster_holds,
        cluster_gpus,
        connect,
        disconnect,
        node_resources,
        reserve_resources,
        shutdown,
    )

    if code_dir is not None:
        progress.message(f"env.id {config.env.id}: {code_dir} goes to every actor as its working directory")
    try:
        if address is None:
            check_local_cluster_holds(config)
        started_local = connect(address, code_dir)
    except BaseException as err:
        if head_start is not None:
            head_start.close()
        if isinstance(err, (ConnectError, PlacementError)):
            raise UsageError(connect_error_line(err, from_variable)) from None
        raise
    startup.mark("ray_connected", time.time())
    try:
        device = choose_device(config, cluster_gpus(), progress, len(spec.obs_shape) == 1)
        act_device = choose_act_device(config, node_resources(), device, len(spec.obs_shape) == 3, progress)
        run_config = with_act_device(config, act_device)
        group = reserve_resources(run_config, device)
        startup.mark("resources_reserved", time.time())
        # None when the head start has solved the run already: TrainingRun then takes its result
        actors = None if head_start is not None and head_start.solved() else ask_for_actors(
            run_config, spec, group, device, startup, check_versions=not started_local)
        run_dir.mkdir(parents=True, exist_ok=True)
        config_text = config_to_yaml(config)
        found_config = (run_dir / "config.yaml").read_bytes() if resume else None
        atomic_write(run_dir / "config.yaml", config_text.encode())
        run = TrainingRun(run_config, spec, run_dir, group, device, clock_start, progress, resume, observers=observers,
                          kept_policy=kept_policy(run_dir) if resume else None, startup=startup, actors=actors,
                          head_start=head_start)
        code = run.execute(config_text)
        written = run_dir / "summary.json"  # what the run wrote at its end is what callers get
        summary = json.loads(written.read_text()) if written.is_file() else run.summary()
        progress.message(_summary_line(summary, run_dir))
        return code, summary
    except (PlacementError, VersionMismatch) as err:
        raise UsageError(str(err)) from None
    except CheckpointRefused as err:  # found by the learner, once Ray was up: the directory goes back as it was
        atomic_write(run_dir / "config.yaml", found_config)
        raise UsageError(f"--resume {run_dir}: {err}; nothing in {run_dir} was changed") from None
    finally:
        if head_start is not None:
            head_start.close()
        if started_local:
            shutdown()
        else:
            disconnect()


def ask_for_actors(config: RunConfig, spec, group, device: str, startup: StartupTimeline,
                         check_versions: bool = True):
    """The run's actors, asked for before the run directory is made (a signal from then on finds them
    there to end the run with). On a cluster others set up, whose nodes may run other versions
    (`check_versions`), the version probes go first, the actors right behind them, and the probes'
    answers are read while the actors start: VersionMismatch (the actors killed) before the run
    directory is made."""
    from cluster.driver.versions import ask_node_versions, check_node_versions
    from cluster.driver.wiring import start_actors

    probes = ask_node_versions(group) if check_versions else None
    actors = start_actors(config, spec, group, device, uuid.uuid4().hex[:8])
    startup.mark("actors_asked", time.time())
    if probes is None:
        return actors
    try:
        check_node_versions(probes)
    except BaseException:
        actors.kill_all()
        raise
    return actors


def _summary_line(summary: dict, run_dir: Path) -> str:
    solve = summary["time_to_solve_s"]
    solved = f"solved in {solve:.1f}s" if solve is not None else "not solved"
    final = summary["final_eval_return"]
    final_text = "-" if final is None else f"{final:.1f}"
    return (f"done: {summary['env_steps']} env steps in {summary['wall_s']:.1f}s, {solved}, "
            f"final eval return {final_text}; wrote {run_dir / 'summary.json'} and {run_dir / 'policy.pt2'}")


