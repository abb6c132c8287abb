"""The driver's run loop: epochs, polling, TensorBoard, checkpoints, stop conditions, shutdown.

The driver is never on the data path. It keeps two `train_epoch` calls queued on the learner (so
the learner never idles between epochs), hands the newest published weights to the evaluator
every `eval.every_epochs` epochs (one evaluation at a time, while the learner keeps training),
reads every actor's counters a few times a second, writes all TensorBoard scalars, restarts
collector loops after Ray restarted a dead collector, and ends the run on `stop.env_steps`, on an
evaluation reaching `stop.eval_return`, or on Ctrl-C (final checkpoint, TensorBoard flushed,
actors killed, exit code 130). The exported policy is the version the deciding evaluation ran on.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Protocol

import ray

from actors.envs import EnvSpec
from cluster.config.schema import RunConfig
from cluster.config.settings import eval_give_up
from cluster.driver.checkpoints import ResumePoint
from cluster.driver.evaluation import EvaluationScheduler
from cluster.driver.metrics import RunMetrics
from cluster.driver.outputs import RunOutputs
from cluster.driver.progress import ProgressLine
from cluster.driver.supervisor import CollectorSupervisor
from cluster.driver.tensorboard_log import TensorBoardLog
from cluster.driver.wiring import COLLECTOR_MAX_RESTARTS, RunActors, start_actors
from cluster.hosts.learner_actor import LearnerActor

POLL_EVERY_S = 0.5
EPOCHS_QUEUED = 2
EXIT_INTERRUPTED = 130


class RunObserver(Protocol):
    """Something that watches a run from the driver (the bench records timelines and memory)."""

    def after_poll(self, run: TrainingRun) -> None:
        """Called after every poll of the actors' counters (a few times a second)."""

    def before_finish(self, run: TrainingRun) -> None:
        """Called once learning has ended, before the collectors stop and the final files."""


class TrainingRun:
    """One training run on an already connected Ray cluster and reserved placement groups.

    It composes the driver's jobs: CollectorSupervisor (collector loops), EvaluationScheduler
    (evaluations), RunOutputs (the run directory's files), RunMetrics and TensorBoardLog; what it
    does itself is the loop that paces epochs and decides when the run ends.
    """

    def __init__(self, config: RunConfig, spec: EnvSpec, run_dir: Path, group, device: str,
                 clock_start: float, progress: ProgressLine, resume: ResumePoint | None = None,
                 observers: tuple[RunObserver, ...] = (), learner_host: type = LearnerActor):
        self.config = config
        self.spec = spec
        self.group = group
        self.device = device
        self.clock_start = clock_start  # wall clock (time.time) at the command's start
        self.progress = progress
        self.resume = resume
        self.observers = observers
        self.learner_host = learner_host  # the learner's Ray host class (the bench and tests subclass it)
        self.metrics = RunMetrics(env_steps_offset=resume.env_steps if resume else 0)
        self.tb = TensorBoardLog(run_dir / "tensorboard")
        self.outputs = RunOutputs(run_dir, config.checkpoint.keep)
        self.epochs_done = resume.epochs if resume else 0
        self.time_to_solve_s: float | None = None
        self.env_steps_at_solve: int | None = None
        self.final_eval: float | None = None
        self.collect_start: float | None = None
        self.collect_end: float | None = None  # when the collectors were told to stop
        self.actors: RunActors | None = None
        self.supervisor: CollectorSupervisor | None = None
        self.evaluations: EvaluationScheduler | None = None
        self.solved_weights = None  # the weights ref whose evaluation reached stop.eval_return
        # A checkpoint asked of the learner and not written yet: (state ref, epoch, counters). The
        # loop never waits for it: the learner serves it after its queued epochs, and an epoch
        # can wait a long time for data (a collector being restarted), so the driver must keep
        # polling and restarting collectors meanwhile.
        self._checkpoint_pending: tuple | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def execute(self, config_text: str) -> int:
        """Run to the end; returns the exit code (0, or 130 after Ctrl-C)."""
        self.tb.text("config", config_text)
        interrupted = False
        try:
            self._start()
            self._loop()
        except KeyboardInterrupt:
            interrupted = True
            self.progress.message("interrupted: writing a final checkpoint and stopping (Ctrl-C again to abort)")
        finally:
            self.progress.finish()
        try:
            self._finish()
        finally:
            self._kill_actors()
            self.tb.close()
        return EXIT_INTERRUPTED if interrupted else 0

    def _start(self) -> None:
        self.actors = start_actors(self.config, self.spec, self.group, self.device, uuid.uuid4().hex[:8],
                                   self.learner_host)
        self.supervisor = CollectorSupervisor(self.actors.collectors, self.actors.learner, COLLECTOR_MAX_RESTARTS,
                                              self.progress)
        self.evaluations = EvaluationScheduler(self.actors.evaluator, self.config.eval.every_epochs,
                                               eval_give_up(self.config))
        state = self.resume.learner_state if self.resume else None
        warmup = self.actors.learner.warmup.remote(state)
        # The collectors start at once (acting with their own initial network until the learner
        # publishes): replay reaches min_size while the learner still imports torch and warms up,
        # and the limiter stops them min_size + error_buffer transitions later.
        self.supervisor.start()
        info = ray.get(warmup)
        self.collect_start = time.time()  # throughput is counted from here, with the learner ready
        how = [info["precision"]] + ["update captured as a CUDA graph"] * info["cuda_graph"] + [
            "networks compiled"] * info["compiled"]
        self.progress.message(f"learner ready on {info['device']} ({', '.join(how)}), "
                              f"{self.config.collectors.num} collectors x {self.config.env.num_envs} envs")
        self.metrics.learner_version = info["version"]
        self.outputs.placement(self.actors.placement())

    def _loop(self) -> None:
        learner = self.actors.learner
        evaluations = self.evaluations
        queued: deque = deque()
        next_epoch = self.epochs_done + 1
        stopping = False
        next_poll = time.perf_counter()
        while True:
            while not stopping and len(queued) < EPOCHS_QUEUED:
                queued.append((next_epoch, learner.train_epoch.remote()))
                next_epoch += 1
            if not queued:
                return
            waiting = [queued[0][1]] + ([evaluations.pending] if evaluations.pending else []) + (
                [self._checkpoint_pending[0]] if self._checkpoint_pending else [])
            timeout = max(0.0, next_poll - time.perf_counter())
            ready, _ = ray.wait(waiting, num_returns=1, timeout=timeout)
            finished = evaluations.pending is not None and evaluations.pending in ready
            if finished and self._on_eval(*evaluations.take()):
                stopping = self._stop_learning()
            if self._checkpoint_pending is not None and self._checkpoint_pending[0] in ready:
                self._write_checkpoint()
            if queued[0][1] in ready:
                epoch, ref = queued.popleft()
                self._on_epoch(epoch, ray.get(ref))
            if not stopping:
                evaluations.maybe_start()
            if time.perf_counter() >= next_poll:
                next_poll = time.perf_counter() + POLL_EVERY_S
                if self._poll() and not stopping:
                    stopping = self._stop_learning()

    def _stop_learning(self) -> bool:
        """Cut the learner's current and queued epochs short; returns True (now stopping)."""
        self.actors.learner.request_stop.remote()
        return True

    def _on_epoch(self, epoch: int, m: dict) -> None:
        """Record one epoch's metrics; note its weights for evaluation; checkpoint when due."""
        if m["updates_in_epoch"] == 0:
            return  # cut before its first update: the run is stopping
        self.epochs_done = epoch
        self.evaluations.on_epoch(epoch, (m.pop("weights_ref"), m.pop("weights_version")))
        self.tb.scalars(self.metrics.epoch(m), self.metrics.env_steps)
        if epoch % self.config.checkpoint.every_epochs == 0:
            self._request_checkpoint()

    def _on_eval(self, result: dict, weights_ref) -> bool:
        """Record one evaluation; True when it reached stop.eval_return."""
        if not result["complete"]:
            return False  # gave up: the target was out of reach
        self.final_eval = result["mean"]
        self.tb.scalars(self.metrics.evaluation(result), self.metrics.env_steps)
        target = self.config.stop.eval_return
        if target is None or result["mean"] < target or self.time_to_solve_s is not None:
            return False
        self.time_to_solve_s = time.time() - self.clock_start
        self.env_steps_at_solve = self.metrics.env_steps
        self.solved_weights = weights_ref
        self.progress.message(
            f"solved: eval return {result['mean']:.1f} >= {target:g} (weights version {result['version']}) "
            f"after {self.time_to_solve_s:.1f}s and {self.metrics.env_steps} env steps")
        return True

    def _poll(self) -> bool:
        """Read every actor's counters, write scalars, draw progress; True when env steps are done."""
        self.supervisor.check()
        refs = [c.stats.remote() for c in self.actors.collectors] + [s.stats.remote() for s in self.actors.shards]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=5.0)
        if len(ready) < len(refs):
            return False  # an actor is slow to answer; read everything again on the next poll
        try:
            stats = ray.get(refs)
        except (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError):
            return False  # a collector is being restarted by Ray; its loop is resumed elsewhere
        num = self.config.collectors.num
        self.supervisor.observe(stats[:num])
        scalars = self.metrics.poll(stats[:num], stats[num:])
        self.tb.scalars(scalars, self.metrics.env_steps)
        m = self.metrics
        self.progress.update(time.time() - self.clock_start, m.env_steps, m.sps, m.last_return,
                             m.last_eval, m.last_loss, scalars.get("perf/policy_lag_mean"))
        for observer in self.observers:
            observer.after_poll(self)
        return m.env_steps >= self.config.stop.env_steps

    # -- the end ------------------------------------------------------------------------------
    def _request_checkpoint(self) -> None:
        """Ask the learner for its state; `_write_checkpoint` writes it once it has come (one at
        a time: a checkpoint due while one is pending is skipped, the next one due catches up)."""
        if self._checkpoint_pending is None:
            counters = {"epochs": self.epochs_done, "env_steps": self.metrics.env_steps, "wall_s": self._wall_s()}
            self._checkpoint_pending = (self.actors.learner.state_bytes.remote(), self.epochs_done, counters)

    def _write_checkpoint(self) -> None:
        """Write the pending checkpoint (waits for the learner's state if it has not come yet)."""
        state_ref, epoch, counters = self._checkpoint_pending
        self._checkpoint_pending = None
        self.outputs.checkpoint(ray.get(state_ref), epoch, counters)

    def _finish(self) -> None:
        if self.actors is None:
            return
        for observer in self.observers:
            observer.before_finish(self)
        # Once the learner is told to stop, its epochs no longer wait for data, so the collectors
        # can stop now: env steps end close to stop.env_steps, not after the final evaluation.
        self.actors.learner.request_stop.remote()
        self.supervisor.stop()
        self.collect_end = time.time()
        if self._checkpoint_pending is not None:  # the learner is stopping: its epochs end now
            self._write_checkpoint()
        self._request_checkpoint()
        self._write_checkpoint()
        export = self.solved_weights
        if export is None:
            # The run ended on env steps (or an interrupt): evaluate and export the final weights.
            export, version = ray.get(self.actors.learner.latest_weights.remote())
            result = self.evaluations.evaluate_now(export, version)
            self.final_eval = result["mean"]
            self.tb.scalars(self.metrics.evaluation(result), self.metrics.env_steps)
        self.outputs.policy(self.actors.learner, export)
        with contextlib.suppress(ray.exceptions.RayError):  # else the last successful poll stands
            self._poll()
        self.outputs.summary(self.summary())
        self.tb.flush()

    def _wall_s(self) -> float:
        return (self.resume.wall_s if self.resume else 0.0) + time.time() - self.clock_start

    def summary(self) -> dict:
        """What summary.json holds."""
        m = self.metrics
        end = self.collect_end or time.time()
        collect_s = end - self.collect_start if self.collect_start else None
        return {
            "env_id": self.config.env.id,
            "seed": self.config.seed,
            "env_steps": m.env_steps,
            "wall_s": round(self._wall_s(), 3),
            "time_to_solve_s": None if self.time_to_solve_s is None else round(self.time_to_solve_s, 3),
            "env_steps_at_solve": self.env_steps_at_solve,
            "final_eval_return": self.final_eval,
            "env_steps_per_s": (m.env_steps - m.env_steps_offset) / collect_s if collect_s else None,
            "learner_samples_per_s": m.samples_per_s,
            "learner_wait_fraction": m.wait_fraction,
            "policy_lag_mean": m.policy_lag_mean,
            "policy_lag_max": m.lag_max,
            "epochs": self.epochs_done,
            "collector_restarts": self.supervisor.restarts if self.supervisor else 0,
            "replay_size_per_shard": m.shard_sizes,
            "replay_inserted_per_shard": m.shard_inserted,
            "replay_bytes_per_transition": m.replay_bytes_per_transition,
        }

    def _kill_actors(self) -> None:
        if self.actors is None:
            return
        for actor in self.actors.all():
            ray.kill(actor, no_restart=True)
