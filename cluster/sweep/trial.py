"""One Tune trial: a raypex run whose collectors, learner (with its replay) and evaluator are the
trial's Ray actors, in the bundles of the placement group Tune reserved for it, driven by Tune's
Trainable calls (cluster/sweep/experiment.py runs the sweep).

- `step`: the run starts on the first call (its driver loop, cluster/driver/run.py, in a thread of
  the trial's actor); each call returns after `report_every_epochs` more epochs with the run's
  figures, and the last once the run has ended (solved, or stop.env_steps), done. The run keeps
  Tune's pace: it goes on past a report once Tune has taken it, so the schedulers compare trials
  where they are, however busy Tune is.
- PBT compares trials side by side: a trial's run waits at its first report until Tune has taken a
  report of every trial of the population (at most POPULATION_WAIT_S). On a busy cluster one trial's
  actors can start many seconds after another's, and a short trial then trained to its end alone,
  never compared, so never exploited.
- `save_checkpoint`: the run writes a checkpoint set now (the learner, every shard's replay, the
  counters), copied into Tune's checkpoint directory with the trial's id beside it.
- `load_checkpoint`: another trial's set (a PBT exploit) replaces this trial's checkpoints and the
  run continues from it: the donor's weights, optimizer, counters and (unless carrying replay is
  off) replay, under this trial's perturbed settings. The trial's own set (a sweep resumed) changes
  nothing: its run directory holds one at least as new.
- `cleanup` (the scheduler stopped or paused the trial): the run ends as after a signal, with its
  final checkpoint, policy.pt2 and summary.json. A sweep's Ctrl-C reaches every trial through a
  file in the experiment directory (STOP_FILE) and ends each the same way, leaving it unfinished
  for `raypex tune --resume`.

Each trial's run directory is EXPERIMENT/trials/TRIAL_ID (at a URI when the experiment is: the
run then works on a local copy and its learner writes replay there, as any run at a URI does):
TensorBoard, checkpoints, policy.pt2,
summary.json, progress.log (the run's lines) and exploits.jsonl (a line per exploit: the donor, its
checkpoint's digests and those of what this trial's learner holds once restored).
"""

from __future__ import annotations

import json
import math
import queue
import shutil
import threading
import time
from pathlib import Path

from ray import tune

from raypex.cluster.config.loading import apply_values, config_to_yaml, validate
from raypex.cluster.driver.checkpoints import REPLAY_SUFFIX, list_checkpoints, load_latest
from raypex.cluster.driver.observer import RunObserver
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.remote_run import RemoteRun
from raypex.cluster.driver.signals import StopAsked
from raypex.cluster.ray_runtime.placement import Reservation
from raypex.cluster.ray_runtime.wiring import resource_request
from raypex.cluster.storage import (
    atomic_write,
    copy_file,
    delete,
    is_uri,
    join,
    list_files,
    modified,
    name_of,
    read_replay,
    write_bytes,
)
from raypex.replay.digest import content_digest

STOP_FILE = "STOP"  # in the experiment directory: the sweep was interrupted, every trial ends its run
TRIAL_DRIVER_CPUS = 0.05  # the trial's own actor: the run's driver loop, which only waits and polls
SAVE_TIMEOUT_S = 300
END_TIMEOUT_S = 300
INTERRUPTED = "interrupted"  # a run ended by the sweep's Ctrl-C: its trial is not finished
RUNNING_DIR = "running"  # in the experiment directory: a file per trial whose run is going on
STARTED_DIR = "started"  # in the experiment directory: a file per PBT trial whose first report Tune has taken
POPULATION_WAIT_S = 120.0  # how long a PBT trial waits at its first report for the rest of its population
# How often a waiting trial looks whether the rest have reported: a trial released a second late let a
# fast one (CartPole's 600 updates/s) train to its end meanwhile, and PBT never saw the two side by
# side (the sweep test's clean-clone run: no exploit). At a URI each look is a request: once a second.
POPULATION_CHECK_S = 0.05
STOP_CHECK_S = 1.0  # how often a trial looks for STOP_FILE (at a URI, each look is a request)
REPORT_WAIT_S = 0.25  # how often a run waiting for Tune to take its report serves Tune's other asks


def trial_bundles(config, device: str) -> list[dict[str, float]]:
    """The trial's placement group: its own actor's bundle, then the learner's and each collector's."""
    return [{"CPU": TRIAL_DRIVER_CPUS}, *resource_request(config, device).bundles()]


class RaypexTrial(tune.Trainable):
    """A raypex run as a Tune trial (see the module docstring)."""

    def setup(self, config: dict, *, base: dict, experiment_dir: str, device: str, carry_replay: bool,
              report_every_epochs: int, start_together: int = 0):
        self.params = dict(config)
        self.device, self.carry_replay, self.report_every_epochs = device, carry_replay, report_every_epochs
        # PBT restarts an exploited trial in a new actor while the old one may still be ending its
        # run (its final checkpoint and uploads): the new one waits, or the two would write over
        # each other in the trial's run directory
        self.running_marker = join(experiment_dir, RUNNING_DIR, self.trial_id)
        _wait_until_gone(self.running_marker, END_TIMEOUT_S)
        self.remote: RemoteRun | None = None
        if is_uri(experiment_dir):  # a copy on this trial's node, its files uploaded as the run goes
            self.remote = RemoteRun(join(experiment_dir, "trials", self.trial_id))
            if self.remote.holds_files():  # a resumed sweep
                self.remote.pull()
            self.run_dir = self.remote.copy
        else:
            self.run_dir = Path(experiment_dir) / "trials" / self.trial_id
        values = dict(self.params)
        if "seed" not in values:  # each trial its own seed, the config's for the first
            values["seed"] = int(base.get("seed", 0)) + _trial_number(self.trial_id)
        self.run_config = validate(apply_values(base, values))
        self.run_dir.mkdir(parents=True, exist_ok=True)  # what it runs with now (PBT perturbs it)
        atomic_write(self.run_dir / "trial.json", json.dumps({"trial_id": self.trial_id, "params": self.params}).encode())
        self.events: queue.Queue = queue.Queue()
        self.watch = TrialWatch(report_every_epochs, self.events, join(experiment_dir, STOP_FILE), self.run_dir,
                                Population(join(experiment_dir, STARTED_DIR), self.trial_id, start_together))
        self.thread: threading.Thread | None = None
        self.summary: dict | None = None  # the run's, once it has ended

    # -- Tune's calls ---------------------------------------------------------------------------
    def step(self) -> dict:
        if self.thread is None:
            self._start_run()
        kind, value = self.watch.next_event()
        if kind == "report":
            return value
        if kind == "failed":
            raise value
        self.summary = value
        if value.get("ended") == INTERRUPTED:  # the sweep is stopping: this trial stays unfinished
            threading.Event().wait()
        return {**summary_figures(value), "done": True}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        written = self.watch.checkpoint_now(self.thread, SAVE_TIMEOUT_S) if self.thread is not None else None
        if written is None:  # not started (restored, then saved), or it ended meanwhile: its newest set
            sets = list_checkpoints(self.run_dir / "checkpoints")
            written = sets[-1] if sets else None
        if written is None:
            raise RuntimeError(f"trial {self.trial_id} has no checkpoint to save")
        target = Path(checkpoint_dir)
        for part in self._set_files(written):
            copy_file(part, target / name_of(part))
        (target / "trial.json").write_text(json.dumps({"trial_id": self.trial_id, "params": self.params}))

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        source = Path(checkpoint_dir)
        donor = json.loads((source / "trial.json").read_text())
        if donor["trial_id"] == self.trial_id and list_checkpoints(self.run_dir / "checkpoints"):
            return  # a resumed sweep: the run directory's newest set is at least this one
        manifest = list_checkpoints(source)[-1]
        counters = json.loads(manifest.read_text())
        replay = [content_digest(read_replay(source / part["file"])["storage"]) for part in counters.get("replay", [])]
        checkpoints = self.run_dir / "checkpoints"
        shutil.rmtree(checkpoints, ignore_errors=True)
        checkpoints.mkdir(parents=True)
        if self.remote is not None:  # this trial's own sets at the URI go as well
            self.remote.forget_checkpoints()
        for part in map(Path, _set_files(manifest)):
            if part.suffix != REPLAY_SUFFIX:
                shutil.copy2(part, checkpoints / part.name)
            elif self.carry_replay:  # where this trial's learner reads its replay
                copy_file(part, join(self.remote.replay_dir(), part.name) if self.remote else checkpoints / part.name)
        if not self.carry_replay:
            atomic_write(checkpoints / manifest.name,
                         json.dumps({k: v for k, v in counters.items() if k != "replay"}, indent=2).encode())
        for stale in ("policy.pt2", "summary.json"):  # the abandoned line's; the donor's line goes on here
            (self.run_dir / stale).unlink(missing_ok=True)
            if self.remote is not None:
                self.remote.forget(stale)
        self.watch.exploit = {"donor": donor["trial_id"], "donor_params": donor["params"], "params": self.params,
                              "checkpoint": manifest.stem, "env_steps": counters["env_steps"],
                              "epochs": counters["epochs"], "replay_carried": self.carry_replay,
                              "donor_weights": checkpoint_weights_digest(manifest.with_suffix(".pt")),
                              "donor_replay": replay if self.carry_replay else []}

    def cleanup(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            self.watch.stop_with = self.watch.stop_with or "stopped by the sweep's scheduler"
            self.thread.join(END_TIMEOUT_S)
        if self.remote is not None and (self.thread is None or not self.thread.is_alive()):
            self.remote.close()

    def _set_files(self, manifest: Path) -> list[str]:
        """This trial's checkpoint set `manifest`: where each of its files is."""
        return _set_files(manifest, self.remote.replay_dir() if self.remote else None)

    def reset_config(self, new_config: dict) -> bool:
        return False  # a new actor per trial start: each run owns its actors

    # -- the run --------------------------------------------------------------------------------
    def _start_run(self) -> None:
        from raypex.cluster.launch import launch
        from raypex.cluster.ray_runtime.runtime import RayRuntime

        resume = load_latest(self.run_dir / "checkpoints", replay_dir=self.remote.replay_dir() if self.remote else None)
        if resume is not None:  # launch reads the config a resumed run was started with
            atomic_write(self.run_dir / "config.yaml", config_to_yaml(self.run_config).encode())
        group = _current_group()
        # bundle 0 is the trial's own, 1 the learner's, 2 + i collector i's (trial_bundles)
        reservation = Reservation(((group, 1),), tuple((group, 2 + i) for i in range(self.run_config.collectors.num)),
                                  "PACK", owned=False)
        runtime = RayRuntime(connected_device=self.device, reservation=reservation)
        log = open(self.run_dir / "progress.log", "a", buffering=1)  # noqa: SIM115 - the thread closes it
        write_bytes(self.running_marker, b"")

        def run() -> None:
            try:
                _, summary = launch(self.run_config, self.run_dir, resume, None, time.time(), ProgressLine(log),
                                    (self.watch,), None, runtime=runtime, remote=self.remote)
                self.events.put(("ended", summary))
            except BaseException as err:  # noqa: BLE001 - raised in Tune's thread, by `step`
                self.events.put(("failed", err))
            finally:
                log.close()
                try:
                    if self.remote is not None:  # the run's last lines in progress.log
                        self.remote.push()
                finally:
                    delete(self.running_marker)

        self.thread = threading.Thread(target=run, name="raypex-trial-run", daemon=True)
        self.thread.start()


class TrialWatch(RunObserver):
    """The trial's view into its run's driver loop: reports every `report_every` epochs, writes a
    checkpoint when Tune asks, records an exploit once the run has restored it, and ends the run
    when asked (by Tune's cleanup, or the sweep's STOP_FILE)."""

    def __init__(self, report_every: int, events: queue.Queue, stop_file: str, run_dir: Path,
                 population: Population | None = None):
        self.report_every, self.events, self.stop_file, self.run_dir = report_every, events, stop_file, run_dir
        self.population = population or Population("", "", 0)
        self.stop_checked = 0.0  # when STOP_FILE was last looked for
        self.stop_with: str | None = None  # set from Tune's thread; raised in the driver's
        self.stopped = False
        self.exploit: dict | None = None  # load_checkpoint's, recorded at the run's first poll
        self.checkpoint_asked = threading.Event()
        self.checkpoints: queue.Queue = queue.Queue()
        self.report_taken = threading.Event()  # clear from a report until Tune's `step` takes it
        self.report_taken.set()

    def after_epoch(self, run, epoch: int, scalars: dict[str, float]) -> None:
        # a run at its end reports once, done, with its summary (`step`): a report now would let PBT
        # exploit a trial that has finished, restart it, and do so again at each restart's report
        ending = run.limit_reached() is not None or run.outcome.ended is not None
        if epoch % self.report_every == 0 and not ending:
            self.report_taken.clear()
            self.events.put(("report", run_figures(run)))

    def next_event(self) -> tuple[str, object]:
        """The run's next event for Tune's `step` (a report, its end, its failure), waiting for it;
        a report taken lets the run train on."""
        kind, value = self.events.get()
        if kind == "report":
            self.population.mark_started()  # once Tune holds the trial's figures: PBT can rank it
            self.report_taken.set()
        return kind, value

    def after_poll(self, run) -> None:
        self._serve(run)
        # Wait for Tune to take the report before training on: a Tune slow to start (under load, 13 s
        # here) took a trial's 18 reports at once, when the trial had almost ended, and PBT, comparing
        # trials at results long gone, never found one to copy. Tune's save and stop are served meanwhile.
        while not (self.stopped or self.stop_with) and not self.report_taken.wait(REPORT_WAIT_S):
            self._serve(run)
        if self.population.waiting():
            self._wait_for_population(run)

    def _wait_for_population(self, run) -> None:
        self.population.done_waiting()  # once: the trial's later reports go on at once
        if self.population.all_started():
            return
        run.progress.message(f"waiting for the other trials of the population of {self.population.size} to report "
                             f"once (PBT compares trials side by side; at most {POPULATION_WAIT_S:g}s)")
        deadline = time.monotonic() + POPULATION_WAIT_S
        every = STOP_CHECK_S if is_uri(self.population.started_dir) else POPULATION_CHECK_S
        while not self.stopped and time.monotonic() < deadline and not self.population.all_started():
            self.checkpoint_asked.wait(every)  # a save Tune asks for meanwhile is served at once
            self._serve(run)  # a stop asked meanwhile ends the run here

    def _serve(self, run) -> None:
        """What Tune's thread asked of the run: record a restored exploit, write a checkpoint, stop."""
        if self.exploit is not None:
            self._record_exploit(run)
        if self.checkpoint_asked.is_set():
            self.checkpoint_asked.clear()
            try:
                run.outputs.write_pending_checkpoint()
                run.request_checkpoint()
                run.outputs.write_pending_checkpoint()
                sets = list_checkpoints(self.run_dir / "checkpoints")
                self.checkpoints.put(sets[-1] if sets else None)
            except Exception as err:  # noqa: BLE001 - Tune's save fails with it
                self.checkpoints.put(err)
        if not self.stopped and (self.stop_with or self._stop_file_there()):
            self.stopped = True
            raise StopAsked(self.stop_with or INTERRUPTED)

    def _stop_file_there(self) -> bool:
        if time.monotonic() - self.stop_checked < STOP_CHECK_S:
            return False
        self.stop_checked = time.monotonic()
        return modified(self.stop_file) is not None

    def before_finish(self, run) -> None:
        self.stopped = True  # the run is ending already: a stop asked now changes nothing
        self.population.mark_started()  # a run ending before its first report keeps no other trial waiting
        self.population.done_waiting()

    def checkpoint_now(self, run_thread: threading.Thread, timeout_s: float) -> Path | None:
        """Ask the run's driver loop for a checkpoint set and wait for it (called from Tune's thread);
        None when the run ends first (its final checkpoint is then the newest set)."""
        self.checkpoint_asked.set()
        deadline = time.monotonic() + timeout_s
        while run_thread.is_alive() and time.monotonic() < deadline:
            try:
                written = self.checkpoints.get(timeout=1.0)
            except queue.Empty:
                continue
            if isinstance(written, BaseException):
                raise written
            return written
        self.checkpoint_asked.clear()
        if run_thread.is_alive():
            raise TimeoutError(f"no checkpoint from the run within {timeout_s:g}s")
        return None

    def _record_exploit(self, run) -> None:
        exploit, self.exploit = self.exploit, None
        record = {**exploit, "resumed_env_steps": run.metrics.env_steps if run.resume is None else run.resume.env_steps,
                  "restored_weights": run.restored_weights, "restored_replay": run.restored_replay}
        with open(self.run_dir / "exploits.jsonl", "a") as out:
            out.write(json.dumps(record) + "\n")
        run.tb.text("tune/exploit", f"copied trial {exploit['donor']} at its checkpoint {exploit['checkpoint']} "
                                    f"({exploit['env_steps']} env steps; replay carried: {exploit['replay_carried']}); "
                                    f"settings now {exploit['params']}")
        run.tb.scalars({"tune/exploited_from_env_steps": float(exploit["env_steps"])}, run.metrics.env_steps)


class Population:
    """The PBT population a trial starts together with: each trial marks itself in `started_dir` once
    Tune has taken its first report (or at its run's end, if that comes first) and waits there until
    `size` trials have (a size of 0 or 1: no wait)."""

    def __init__(self, started_dir: str, trial_id: str, size: int):
        self.started_dir, self.trial_id, self.size = started_dir, trial_id, size
        self.marked = False  # a population of 0 or 1 is never marked, so never waited for
        self.waited = False

    def mark_started(self) -> None:
        if not self.marked and self.size > 1:
            write_bytes(join(self.started_dir, self.trial_id), b"")
            self.marked = True

    def waiting(self) -> bool:
        """Whether Tune has taken the trial's first report and it has still to wait for the rest."""
        return self.marked and not self.waited

    def all_started(self) -> bool:
        return len(list_files(self.started_dir)) >= self.size

    def done_waiting(self) -> None:
        self.waited = True


def run_figures(run) -> dict:
    """What a trial reports to Tune after an epoch (the metric the schedulers compare: eval_return,
    the newest complete evaluation's mean, -inf before the first)."""
    m, outcome = run.metrics, run.outcome
    return {"env_steps": m.env_steps, "epochs": run.epochs_done,
            "eval_return": m.last_eval if m.last_eval is not None else -math.inf,
            "eval_return_best": outcome.best.mean if outcome.best is not None else -math.inf,
            "episode_return": m.last_return if m.last_return is not None else -math.inf,
            "sps": m.sps or 0.0, "loss": m.last_loss if m.last_loss is not None else math.nan,
            "solved": outcome.solved is not None}


def summary_figures(summary: dict) -> dict:
    """The last report of a run that has ended, from its summary.json."""
    final = summary.get("final_eval_return")
    return {"env_steps": summary["env_steps"], "epochs": summary["epochs"],
            "eval_return": final if final is not None else -math.inf,
            "eval_return_best": summary.get("policy_eval_return") or (final if final is not None else -math.inf),
            "solved": summary.get("time_to_solve_s") is not None, "ended": summary["ended"]}


def checkpoint_weights_digest(path: Path) -> str:
    """The digest of the policy's weights in a checkpoint's learner state (ckpt-E.pt), as a learner
    that restored it reports them (cluster/hosts/learner_host.py `warmup`)."""
    from raypex.learner.learner_state import policy_arrays, read_learner_state

    return content_digest(policy_arrays(read_learner_state(path.read_bytes(), name=str(path))))


def _set_files(manifest: Path, replay_dir: str | None = None) -> list[str]:
    """Where every file of the checkpoint set `manifest` (ckpt-E.json) is, the manifest last; its
    replay files in `replay_dir` when given (a run at a URI)."""
    counters = json.loads(manifest.read_text())
    replay = [join(replay_dir or str(manifest.parent), part["file"]) for part in counters.get("replay", [])]
    return [str(manifest.with_suffix(".pt")), *replay, str(manifest)]


def _wait_until_gone(marker: str, timeout_s: float) -> None:
    """Return once no file is at `marker` (a run of the trial in another actor has ended), or after
    `timeout_s` (that actor died without removing it)."""
    deadline = time.monotonic() + timeout_s
    while modified(marker) is not None and time.monotonic() < deadline:
        time.sleep(0.2)  # another actor's run ending: nothing to wait on but its file


def _trial_number(trial_id: str) -> int:
    tail = trial_id.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _current_group():
    from ray.util import get_current_placement_group

    group = get_current_placement_group()
    if group is None:
        raise RuntimeError("a raypex trial runs in the placement group Tune reserves for it (trial_bundles)")
    return group
