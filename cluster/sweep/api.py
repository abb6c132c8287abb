"""`raypex.tune`: a sweep from Python, as `raypex tune` runs it (the command calls this).

    import raypex
    outcome = raypex.tune("cartpole", ["learner.lr=loguniform(1e-4,1e-1)"], samples=4, scheduler="pbt")
    print(outcome.table()); outcome.best["policy"]; outcome.grid  # Tune's ResultGrid

Everything is checked before anything starts (one-line UsageError: search-space syntax, unknown
keys, values the schema refuses, a PBT search over what shapes the networks); Ray Tune is imported
only once the sweep starts.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from raypex.cluster.config.arguments import UsageError, split_positional
from raypex.cluster.config.loading import ConfigError, apply_overrides, apply_values, config_origin, read_yaml
from raypex.cluster.driver.checkpoints import check_run_files
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.run_dir import check_writable
from raypex.cluster.storage import StorageUnavailable, UnsafeRunFile, is_uri, join, list_files, read_bytes, run_location
from raypex.cluster.sweep.space import SweepRequest, check_request, default_space, split_space
from raypex.cluster.sweep.tune_state import UnsignedTuneState, check_tune_state


def tune(config: str | Path = "cartpole", overrides: Mapping[str, Any] | list[str] | None = None, *, samples: int = 4,
         scheduler: str = "none", experiment_dir: str | Path | None = None, carry_replay: bool = True,
         report_every_epochs: int = 5, perturb_every: int = 2, address: str | None = None,
         resume: str | Path | None = None, trust_tune_state: bool = False, progress: ProgressLine | None = None):
    """Run a sweep of `samples` trials of `config` with `overrides`, some of them search spaces
    (`{"learner.lr": "loguniform(1e-4,1e-1)"}` or ["learner.lr=loguniform(1e-4,1e-1)"]), under
    `scheduler` (none: random search; asha; pbt); or, with `resume`, continue the sweep in that
    experiment directory: Ray Tune unpickles its state, so only when this user's raypex signed it
    (cluster/sweep/tune_state.py) or `trust_tune_state` says it is the caller's own. Returns the SweepOutcome (cluster/sweep/experiment.py)."""
    progress = progress or ProgressLine(sys.stderr)
    if resume is not None:
        experiment = run_location(str(resume))
        try:
            request = SweepRequest.from_json(json.loads(read_bytes(join(str(experiment), "sweep.json"))))
        except StorageUnavailable as err:
            raise UsageError(f"--resume {err}") from None
        except (OSError, ValueError, KeyError, TypeError):
            raise UsageError(f"--resume {experiment}: no readable sweep.json there (not a raypex tune experiment "
                             "directory)") from None
        try:
            check_run_files(experiment)
            if not trust_tune_state:
                check_tune_state(str(experiment))
        except (UnsafeRunFile, UnsignedTuneState) as err:
            raise UsageError(f"--resume {experiment}: {err}") from None
        return _run(request, experiment, None, address, progress, resume=True)
    path, given = split_positional([str(config)])
    try:
        data = read_yaml(path) if path is not None else {}
        given_list = list(overrides) if overrides is not None and not isinstance(overrides, Mapping) else []
        if isinstance(overrides, Mapping):
            merged = apply_values(data, dict(overrides))
        else:
            merged = apply_overrides(data, [*given, *given_list])
        fixed, space = split_space(merged)
        defaulted = not space
        space = space or default_space(fixed)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    check_request(fixed, space, samples, scheduler, report_every_epochs, perturb_every)
    if defaulted:
        progress.message("no value is a search space: searching " + ", ".join(f"{k}={d.text()}" for k, d in space.items())
                         + ", around the config's")
    origin = config_origin(f"the {path.stem} config" if path else "the default config", data,
                           dict(overrides) if isinstance(overrides, Mapping) else [*given, *given_list])
    env_id = (fixed.get("env") or {}).get("id", "CartPole-v1")
    if experiment_dir is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        experiment_dir = Path("runs") / f"tune-{str(env_id).replace('/', '-')}-{stamp}"
    experiment = run_location(str(experiment_dir))
    try:
        held = list_files(experiment)
    except OSError as err:  # StorageUnavailable, or the store's own refusal
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UsageError(f"--experiment-dir {experiment}: {first}") from None
    if held:
        raise UsageError(f"--experiment-dir {experiment} already holds files; choose a new one (or --resume it)")
    if not is_uri(experiment):
        check_writable(experiment, "--experiment-dir")
    request = SweepRequest(fixed, space, samples, scheduler, carry_replay, report_every_epochs, perturb_every)
    return _run(request, experiment, origin, address, progress, resume=False)


def _run(request: SweepRequest, experiment: Path | str, origin, address: str | None, progress: ProgressLine, resume: bool):
    try:
        from raypex.cluster.sweep.experiment import run_sweep
    except ImportError as err:  # ray without its tune extra: pyarrow, pandas, ...
        raise UsageError(f"raypex tune needs Ray Tune ({err}); install it: pip install 'raypex[tune]'") from None
    return run_sweep(request, experiment, origin, address, progress, resume=resume)
