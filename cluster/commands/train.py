"""`raypex train`: read the arguments into a config and a run directory, then `launch` the run (cluster/launch.py).

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
import sys
from collections.abc import Callable
from pathlib import Path

from raypex.cluster.config.arguments import UsageError, default_run_dir, split_positional
from raypex.cluster.config.loading import (
    ConfigError,
    ConfigOrigin,
    config_origin,
    load_config,
    read_yaml,
)
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.driver.checkpoints import ResumePoint
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.remote_run import RemoteRun
from raypex.cluster.driver.run_dir import check_writable, open_remote
from raypex.cluster.driver.run_errors import RunFailed
from raypex.cluster.launch import launch, open_resumed
from raypex.cluster.storage import OutputNotWritten, is_uri


def resolve_config(args: argparse.Namespace, warn: Callable[[str], None]
                   ) -> tuple[RunConfig, Path, ResumePoint | None, ConfigOrigin | None, RemoteRun | None]:
    """(config, run dir, resume point or None, what the config was written for: None for a resumed
    run, the URI the run lives at when it is one: then the run dir is its local copy) from the
    arguments; UsageError on any mistake, with nothing written (cluster/driver/run_dir.py checks
    the directory)."""
    config_path, overrides = split_positional(args.args)
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    if getattr(args, "local", False):
        overrides.append("runtime=local")
    try:
        if args.resume is not None:
            if config_path is not None or args.run_dir is not None:
                raise UsageError("--resume RUN_DIR takes the config from RUN_DIR; give no CONFIG or --run-dir")
            config, run_dir, point, remote = open_resumed(str(args.resume), overrides, None, warn)
            return config, run_dir, point, None, remote
        config = load_config(config_path, overrides)
        origin = config_origin(f"the {config_path.stem} config" if config_path else "the default config",
                               read_yaml(config_path) if config_path else {}, overrides)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    if args.run_dir is not None and is_uri(args.run_dir):
        remote = open_remote(args.run_dir, "--run-dir", resume=False)
        return config, remote.copy, None, origin, remote
    run_dir = args.run_dir if args.run_dir is not None else default_run_dir(config.env.id, config.seed)
    if run_dir.is_dir() and any(run_dir.iterdir()):
        raise UsageError(f"--run-dir {run_dir} already holds files; choose a new directory or use --resume {run_dir}")
    check_writable(run_dir, "--run-dir")
    return config, run_dir, None, origin, None


def run_train(args: argparse.Namespace, clock_start: float) -> int:
    """The whole `raypex train` command; returns the exit code."""
    progress = ProgressLine(sys.stderr)
    config, run_dir, resume, origin, remote = resolve_config(args, lambda line: progress.message(f"warning: {line}"))
    try:
        code, _ = launch(config, run_dir, resume, args.address, clock_start, progress, origin=origin, remote=remote)
    except RunFailed as err:
        if getattr(args, "debug", False) and err.details:
            print(err.details.rstrip(), file=sys.stderr)
        traceback = f"; its traceback: {err.log}" if err.log else ""
        resume = f"; continue it with: raypex train --resume {remote.uri if remote else run_dir}" if err.resumable else ""
        print(f"raypex: run failed: {err}{traceback}{resume}", file=sys.stderr)
        return 1
    except OutputNotWritten as err:  # before the run began (config.yaml on a full disk)
        print(f"raypex: error: {err}", file=sys.stderr)
        return 1
    finally:
        if remote is not None:
            remote.close()
    return code


