"""A sweep: raypex runs as Ray Tune trials (cluster/sweep/trial.py), with random search, ASHA
(early stopping) or PBT (population based training, each exploit carrying the donor's replay).

The experiment directory (a local path, or a pyarrow filesystem URI as a run directory may be:
Tune keeps its state there and each trial's run directory is at the URI too) holds everything: sweep.json (what was asked, read again by `--resume`),
tune/ (Tune's own state), trials/TRIAL_ID/ (each trial's run directory: TensorBoard, checkpoints,
policy.pt2, summary.json; `tensorboard --logdir EXP/trials` shows them together), results.json
(a row per trial) and policy.pt2 (the best trial's). A mistake in the sweep's settings is one line
before anything starts (cluster/sweep/space.py). Ctrl-C (or SIGTERM) ends every trial's run as a
stop does and leaves the sweep unfinished: `raypex tune --resume EXP` continues it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune import Callback
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining

from raypex.actors.env_ids import code_to_ship
from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import ConfigOrigin, validate
from raypex.cluster.ray_runtime.devices import choose_act_device, choose_device, with_act_device
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.ray_runtime.wiring import cluster_gpus, connect, disconnect, node_resources, shutdown
from raypex.cluster.plan.env_fit import fit_run
from raypex.cluster.storage import (
    copy_file,
    delete,
    is_uri,
    join,
    list_files,
    modified,
    read_bytes,
    reason,
    remote,
    write_bytes,
)
from raypex.cluster.sweep.space import Domain, SweepRequest, grid_size
from raypex.cluster.sweep.trial import (
    INTERRUPTED,
    RUNNING_DIR,
    STOP_FILE,
    TRIAL_DRIVER_CPUS,
    RaypexTrial,
    trial_bundles,
)
from raypex.cluster.sweep.tune_state import sign_tune_state

METRIC = "eval_return"  # the newest evaluation's mean: what ASHA and PBT compare
STATUS_EVERY_S = 10.0
CHECKPOINTS_KEPT = 4  # per trial in Tune's storage: PBT's donors are exploited from them
STOP_WAIT_S = 300  # after Ctrl-C, how long the sweep waits for its trials' runs to end


def tune_domain(domain: Domain):
    """Tune's search-space object for one Domain."""
    kinds = {"loguniform": tune.loguniform, "uniform": tune.uniform, "randint": tune.randint}
    if domain.kind in kinds:
        return kinds[domain.kind](*domain.args)
    return tune.choice(list(domain.args)) if domain.kind == "choice" else tune.grid_search(list(domain.args))


def run_sweep(request: SweepRequest, experiment_dir: Path | str, origin: ConfigOrigin | None, address: str | None,
              progress: ProgressLine, resume: bool = False) -> SweepOutcome:
    """Run (or, with `resume`, continue) the sweep in `experiment_dir`; its outcome once every trial
    has ended or the sweep was interrupted."""

    config = validate(request.base)
    experiment = experiment_dir if is_uri(experiment_dir) else str(Path(experiment_dir).resolve())
    if not resume:
        config, _, lines = fit_run(config, origin, address is None)
        for line in lines:
            progress.message(line)
        request = dataclasses.replace(request, base=config.model_dump(mode="json"))
        write_bytes(join(experiment, "sweep.json"), json.dumps(request.to_json(), indent=2).encode())
    delete(join(experiment, STOP_FILE))
    for trial in list_files(join(experiment, RUNNING_DIR)):  # left by trials whose sweep was killed
        delete(join(experiment, RUNNING_DIR, trial))
    started_local = connect(address, code_to_ship(config.env.id), progress.message)
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # raypex's stop: every trial's run ends first (SweepStop)
    # Tune's own TensorBoard logger would write each trial's -inf before its first evaluation (each run
    # has its own TensorBoard); its JSON and CSV results stay.
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # Tune's tables stay out of the output: raypex prints its own lines
    # and its warnings too (a restored experiment's trials that never reported, its own Ctrl-C text)
    logging.getLogger("ray.tune").setLevel(logging.ERROR)
    stop = SweepStop(experiment)
    previous = {sig: signal.signal(sig, stop.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        flat = len(inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack,
                               config.env.wrappers).obs_shape) == 1
        device = choose_device(config, cluster_gpus(), progress, flat)
        config = with_act_device(config, choose_act_device(config, node_resources(), device, not flat, progress))
        population = request.samples * grid_size(request.space)
        if request.scheduler == "pbt":
            config = population_fits(config, population, device, sum(node.get("CPU", 0.0) for node in node_resources()),
                                     progress)
        base = config.model_dump(mode="json")
        trainable = tune.with_resources(
            tune.with_parameters(RaypexTrial, base=base, experiment_dir=experiment, device=device,
                                 carry_replay=request.carry_replay, report_every_epochs=request.report_every_epochs,
                                 start_together=population if request.scheduler == "pbt" else 0),
            tune.PlacementGroupFactory(trial_bundles(config, device), strategy="PACK"))
        callbacks = [stop, SweepProgress(experiment), JsonLoggerCallback(), CSVLoggerCallback()]
        filesystem, storage = remote(experiment) if is_uri(experiment) else (None, experiment)
        if resume:
            tuner = tune.Tuner.restore(f"{storage}/tune", trainable, resume_unfinished=True, resume_errored=True,
                                       storage_filesystem=filesystem)
        else:
            run_config = tune.RunConfig(name="tune", storage_path=storage, storage_filesystem=filesystem, verbose=0,
                                        callbacks=callbacks,
                                        checkpoint_config=tune.CheckpointConfig(num_to_keep=CHECKPOINTS_KEPT))
            tuner = tune.Tuner(trainable, param_space={k: tune_domain(d) for k, d in request.space.items()},
                               tune_config=tune.TuneConfig(metric=METRIC, mode="max", num_samples=request.samples,
                                                           scheduler=_scheduler(request, config), reuse_actors=False),
                               run_config=run_config)
        if resume:  # Tuner.restore keeps the first run's callbacks out: ours again
            tuner._local_tuner._run_config.callbacks = callbacks
        progress.message(f"sweep: {population} trials of {config.env.id}, "
                         f"scheduler {request.scheduler}, searching {', '.join(request.space)}; "
                         f"TensorBoard: tensorboard --logdir {join(experiment, 'trials')}")
        grid = tuner.fit()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        try:  # what a later --resume lets Tune unpickle (cluster/sweep/tune_state.py)
            sign_tune_state(experiment)
        except OSError as err:  # the storage went away: the sweep's own outcome matters more here
            progress.message(f"Tune's state in {experiment} was not signed ({reason(err)}): resuming this sweep "
                             "will need --trust-tune-state")
        if started_local:
            shutdown()
        else:  # a joined cluster stays up; this process leaves it, as a run does
            disconnect()
    return dataclasses.replace(collect_outcome(experiment, grid, stop.asked), experiment_dir=experiment_dir)


def population_fits(config, population: int, device: str, cluster_cpus: float, progress: ProgressLine):
    """The config with each trial's CPU requests scaled down, when needed, so that the whole PBT
    population trains at once on the cluster, with room for one trial more: an exploited trial
    restarts while its old actors are still going (without that room it waits, and PBT pauses
    another trial to let a waiting one run, and so on). PBT compares trials side by side: one at a
    time, none would ever be exploited. Ray does not hold an actor to its CPU share: scaled trials
    share the cores, each slower."""
    per_trial = sum(bundle.get("CPU", 0.0) for bundle in trial_bundles(config, device))
    slots = population + 1
    if slots * per_trial <= cluster_cpus:
        return config
    runs = per_trial - TRIAL_DRIVER_CPUS  # what scales: the learner's and the collectors' requests
    scale = (0.98 * cluster_cpus - slots * TRIAL_DRIVER_CPUS) / (slots * runs)  # 2%: rounding
    learner = config.learner.model_copy(update={"num_cpus": round(config.learner.num_cpus * scale, 4)})
    collectors = config.collectors.model_copy(update={"num_cpus": round(config.collectors.num_cpus * scale, 4)})
    progress.message(f"{population} trials x {per_trial:g} CPUs do not fit the cluster's {cluster_cpus:g} CPUs: each "
                     f"trial's CPU requests are scaled by {scale:.2f} so the population trains at once (PBT compares "
                     "its trials side by side), with room for an exploited trial's restart")
    return config.model_copy(update={"learner": learner, "collectors": collectors})


def _scheduler(request: SweepRequest, config):
    if request.scheduler == "asha":
        max_t = config.stop.env_steps
        return ASHAScheduler(time_attr="env_steps", max_t=max_t, grace_period=max(1, max_t // 27), reduction_factor=3)
    if request.scheduler == "pbt":
        return PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=request.perturb_every,
                                       hyperparam_mutations={k: tune_domain(d) for k, d in request.space.items()},
                                       quantile_fraction=0.25, resample_probability=0.25)
    return None


class SweepStop(Callback):
    """Ctrl-C or SIGTERM of a sweep (a Tune callback): every trial's run is told to end (STOP_FILE)
    and waited for, then Tune is stopped as its own SIGUSR1 does, so the experiment stays
    resumable. A second signal stops waiting."""

    def __init__(self, experiment: str):
        self.experiment = experiment
        self.asked: str | None = None  # the signal's name, once one came
        self.handled = False

    def on_signal(self, signum, frame) -> None:
        if self.asked is not None:
            raise KeyboardInterrupt
        self.asked = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        if self.asked is None or self.handled:
            return
        self.handled = True
        since = time.time()
        write_bytes(join(self.experiment, STOP_FILE), b"")
        running = [t for t in trials if t.status == "RUNNING"]
        say(f"{self.asked}: ending the runs of {len(running)} running trials (final checkpoint and "
                              "summary each; send it again to stop waiting)")
        deadline = time.time() + STOP_WAIT_S
        waiting = list(running)
        while waiting and time.time() < deadline:
            waiting = [t for t in waiting if not _ended_since(join(self.experiment, "trials", t.trial_id), since)]
            time.sleep(0.2)  # polling files other processes write; nothing to wait on instead
        os.kill(os.getpid(), signal.SIGUSR1)  # Tune's own stop: the experiment's state saved, unfinished


def say(line: str) -> None:
    """One line for the user, from Tune's callbacks (which Tune pickles: they hold no stream)."""
    print(line, file=sys.stderr, flush=True)


def _ended_since(run_dir: str, since: float) -> bool:
    """Whether the trial's run has ended: its summary.json written since the stop, or one that says
    it ended on its own (solved, its env steps, failed) before it."""
    path = join(run_dir, "summary.json")
    summary = _read_json(path)
    if summary is None:
        return False
    return (modified(path) or 0.0) >= since or summary.get("ended") not in (None, INTERRUPTED)


class SweepProgress(Callback):
    """A line when a trial ends, one for each PBT exploit once its recipient has restored it, and
    every STATUS_EVERY_S one for the sweep (a Tune callback)."""

    def __init__(self, experiment: str):
        self.experiment = experiment
        self.exploits_seen: dict[str, int] = {}
        self.start = time.time()
        self.last = 0.0
        self.best: tuple[float, str] | None = None

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        records = _read_lines(join(self.experiment, "trials", trial.trial_id, "exploits.jsonl"))
        for line in records[self.exploits_seen.get(trial.trial_id, 0):]:
            record = json.loads(line)
            say(f"trial {trial.trial_id} copied trial {record['donor']} (PBT exploit at {record['env_steps']} env steps, "
                f"replay {'carried' if record['replay_carried'] else 'not carried'}); its settings now {record['params']}")
        self.exploits_seen[trial.trial_id] = len(records)
        value = result.get(METRIC, -math.inf)
        if value is not None and math.isfinite(value) and (self.best is None or value > self.best[0]):
            self.best = (value, trial.trial_id)
        if time.time() - self.last >= STATUS_EVERY_S:
            self.last = time.time()
            counts: dict[str, int] = {}
            for t in trials:
                counts[t.status.lower()] = counts.get(t.status.lower(), 0) + 1
            state = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            best = "-" if self.best is None else f"{self.best[0]:.1f} (trial {self.best[1]})"
            say(f"[{time.time() - self.start:6.0f}s] trials: {state} | best eval {best}")

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        result = trial.last_result or {}
        say(f"trial {trial.trial_id} ended ({result.get('ended', 'stopped by the scheduler')}): "
                              f"{result.get('env_steps', 0)} env steps, best eval {result.get('eval_return_best')}")


@dataclass
class SweepOutcome:
    """What a sweep left: a row per trial (results.json), the best trial and its policy's copy."""

    experiment_dir: Path | str  # as given: a str when it is a URI
    rows: list[dict]  # one per trial, best evaluation first, as results.json holds them
    best: dict | None  # the best-evaluated trial with a policy.pt2 (its row), or None
    interrupted: str | None  # the signal that stopped it, or None: every trial ended
    grid: Any = None  # Tune's ResultGrid

    def table(self) -> str:
        """The results as a text table, best first."""
        if not self.rows:
            return "no trial ran"
        keys = sorted({k for row in self.rows for k in row["params"]})
        header = ["trial", *keys, "ended", "env steps", "best eval", "solved at", "run time", "exploits"]
        lines = [header]
        for row in self.rows:
            solve = row["env_steps_at_solve"]
            lines.append([row["trial"], *(_short(row["params"].get(k)) for k in keys), row["ended"] or "-",
                          str(row["env_steps"]), _short(row["best_eval"]), "-" if solve is None else f"{solve} env steps",
                          f"{row['wall_s']:.1f}s", str(row["exploits"])])
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) for line in lines)


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def collect_outcome(experiment: str, grid, interrupted: str | None) -> SweepOutcome:
    """Read every trial's summary.json into rows (best first), copy the best trial's policy.pt2 to
    the experiment directory and write results.json."""
    rows = []
    files = list_files(join(experiment, "trials"))
    for trial in sorted({name.split("/", 1)[0] for name in files if "/" in name}):
        run_dir = join(experiment, "trials", trial)
        summary = _read_json(join(run_dir, "summary.json")) or {}
        params = (_read_json(join(run_dir, "trial.json")) or {}).get("params", {})  # PBT's latest perturbation
        best = summary.get("policy_eval_return", summary.get("final_eval_return"))
        rows.append({"trial": trial, "params": params, "ended": summary.get("ended"),
                     "env_steps": summary.get("env_steps", 0), "best_eval": best,
                     "time_to_solve_s": summary.get("time_to_solve_s"), "run_dir": run_dir,
                     "env_steps_at_solve": summary.get("env_steps_at_solve"), "wall_s": summary.get("wall_s", 0.0),
                     "exploits": len(_read_lines(join(run_dir, "exploits.jsonl"))),
                     "policy": join(run_dir, "policy.pt2") if f"{trial}/policy.pt2" in files else None})
    errors = {_result_trial(result): str(result.error).strip().splitlines()[-1]
              for result in (grid or []) if result.error is not None}
    for row in rows:
        row["error"] = errors.get(row["trial"])
    rows.sort(key=lambda r: (r["best_eval"] is None, -(r["best_eval"] or 0.0),
                             r["env_steps_at_solve"] if r["env_steps_at_solve"] is not None else math.inf))
    best = next((row for row in rows if row["policy"] is not None), None)
    if best is not None:
        copy_file(best["policy"], join(experiment, "policy.pt2"))
    write_bytes(join(experiment, "results.json"), json.dumps({"trials": rows, "best": best,
                                                               "interrupted": interrupted}, indent=2).encode())
    return SweepOutcome(experiment, rows, best, interrupted, grid)


def _result_trial(result) -> str | None:
    """The trial id of a Tune Result (its metrics say it once it reported; its directory's name,
    RaypexTrial_<id>_<index>_..., always does)."""
    if result.metrics.get("trial_id"):
        return result.metrics["trial_id"]
    parts = Path(result.path).name.split("_")
    return "_".join(parts[1:3]) if len(parts) > 2 else None


def _read_json(location: str) -> dict | None:
    try:
        data = json.loads(read_bytes(location))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _read_lines(location: str) -> list[str]:
    """The lines of a text file another process appends to; none when it is not there yet."""
    try:
        return read_bytes(location).decode().splitlines()
    except OSError:
        return []
