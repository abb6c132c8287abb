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
import json
import time
import uuid
from collections import deque
from pathlib import Path

import ray

from actors.envs import EnvSpec
from cluster.config.schema import RunConfig
from cluster.config.settings import eval_give_up
from cluster.driver.checkpoints import ResumePoint, atomic_write, save_checkpoint
from cluster.driver.metrics import RunMetrics
from cluster.driver.progress import ProgressLine
from cluster.driver.tensorboard_log import TensorBoardLog
from cluster.driver.wiring import COLLECTOR_MAX_RESTARTS, RunActors, start_actors

POLL_EVERY_S = 0.5
EPOCHS_QUEUED = 2
EXIT_INTERRUPTED = 130
FULL_EVAL_EVERY = 5  # with eval.max_return: every 5th evaluation runs to the end


class RunFailed(Exception):
    """The run cannot go on (a collector keeps dying, the learner died); one-line message."""


class TrainingRun:
    """One training run on an already connected Ray cluster and reserved placement groups."""

    def __init__(self, config: RunConfig, spec: EnvSpec, run_dir: Path, group, device: str,
                 clock_start: float, progress: ProgressLine, resume: ResumePoint | None = None):
        self.config = config
        self.spec = spec
        self.run_dir = run_dir
        self.group = group
        self.device = device
        self.clock_start = clock_start  # wall clock (time.time) at the command's start
        self.progress = progress
        self.resume = resume
        self.metrics = RunMetrics(env_steps_offset=resume.env_steps if resume else 0)
        self.tb = TensorBoardLog(run_dir / "tensorboard")
        self.epochs_done = resume.epochs if resume else 0
        self.time_to_solve_s: float | None = None
        self.env_steps_at_solve: int | None = None
        self.final_eval: float | None = None
        self.collect_start: float | None = None
        self.collect_end: float | None = None  # when the collectors were told to stop
        self.restarts = [0] * config.collectors.num  # new collector processes seen (Ray restarts)
        self.incarnations: list[str | None] = [None] * config.collectors.num
        self.loop_failures = [0] * config.collectors.num  # run loops that ended in an error
        self.actors: RunActors | None = None
        self.latest_weights: tuple | None = None  # (ref, version) of the newest published weights
        self.eval_due = False
        self.eval_in_flight: tuple | None = None  # (result ref, weights ref)
        self.evals_started = 0
        self.eval_give_up = eval_give_up(config)  # None: every evaluation runs to the end
        self.solved_weights = None  # the weights ref whose evaluation reached stop.eval_return

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
        self.actors = start_actors(self.config, self.spec, self.group, self.device, uuid.uuid4().hex[:8])
        state = self.resume.learner_state if self.resume else None
        warmup = self.actors.learner.warmup.remote(state)
        # The collectors start at once (acting with their own initial network until the learner
        # publishes): replay reaches min_size while the learner still imports torch and warms up,
        # and the limiter stops them min_size + error_buffer transitions later.
        self.run_refs = [c.run.remote() for c in self.actors.collectors]
        info = ray.get(warmup)
        self.collect_start = time.time()  # throughput is counted from here, with the learner ready
        how = [info["precision"]] + ["update captured as a CUDA graph"] * info["cuda_graph"] + [
            "networks compiled"] * info["compiled"]
        self.progress.message(f"learner ready on {info['device']} ({', '.join(how)}), "
                              f"{self.config.collectors.num} collectors x {self.config.env.num_envs} envs")
        self.metrics.learner_version = info["version"]
        atomic_write(self.run_dir / "placement.json", json.dumps(self.actors.placement(), indent=2).encode())

    def _loop(self) -> None:
        learner = self.actors.learner
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
            waiting = [queued[0][1]] + ([self.eval_in_flight[0]] if self.eval_in_flight else [])
            timeout = max(0.0, next_poll - time.perf_counter())
            ready, _ = ray.wait(waiting, num_returns=1, timeout=timeout)
            if self.eval_in_flight and self.eval_in_flight[0] in ready:
                result_ref, weights_ref = self.eval_in_flight
                self.eval_in_flight = None
                if self._on_eval(ray.get(result_ref), weights_ref):
                    stopping = self._stop_learning()
            if queued[0][1] in ready:
                epoch, ref = queued.popleft()
                self._on_epoch(epoch, ray.get(ref))
            if not stopping:
                self._maybe_start_eval()
            if time.perf_counter() >= next_poll:
                next_poll = time.perf_counter() + POLL_EVERY_S
                if self._poll() and not stopping:
                    stopping = self._stop_learning()

    def _stop_learning(self) -> bool:
        """Cut the learner's current and queued epochs short; returns True (now stopping)."""
        self.actors.learner.request_stop.remote()
        return True

    def _on_epoch(self, epoch: int, m: dict) -> None:
        """Record one epoch's metrics; mark an evaluation due; checkpoint when due."""
        if m["updates_in_epoch"] == 0:
            return  # cut before its first update: the run is stopping
        self.epochs_done = epoch
        self.latest_weights = (m.pop("weights_ref"), m.pop("weights_version"))
        self.tb.scalars(self.metrics.epoch(m), self.metrics.env_steps)
        if epoch % self.config.eval.every_epochs == 0:
            self.eval_due = True
        if epoch % self.config.checkpoint.every_epochs == 0:
            self._checkpoint()

    def _maybe_start_eval(self) -> None:
        """Start an evaluation of the newest weights when one is due and none is running.

        With eval.max_return set, evaluations may give up once stop.eval_return is out of reach,
        except every FULL_EVAL_EVERY-th, which runs to the end so eval/return_mean keeps a curve.
        """
        if self.eval_due and self.eval_in_flight is None and self.latest_weights is not None:
            weights_ref, version = self.latest_weights
            give_up = self.eval_give_up if self.evals_started % FULL_EVAL_EVERY else None
            self.evals_started += 1
            self.eval_in_flight = (self.actors.evaluator.evaluate.remote(weights_ref, version, give_up), weights_ref)
            self.eval_due = False

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
        self._restart_dead_collectors()
        refs = [c.stats.remote() for c in self.actors.collectors] + [s.stats.remote() for s in self.actors.shards]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=5.0)
        if len(ready) < len(refs):
            return False  # an actor is slow to answer; read everything again on the next poll
        try:
            stats = ray.get(refs)
        except (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError):
            return False  # a collector is being restarted by Ray; its loop is resumed elsewhere
        num = self.config.collectors.num
        for i, collector_stats in enumerate(stats[:num]):
            if self.incarnations[i] not in (None, collector_stats["incarnation"]):
                self.restarts[i] += 1
            self.incarnations[i] = collector_stats["incarnation"]
        scalars = self.metrics.poll(stats[:num], stats[num:])
        self.tb.scalars(scalars, self.metrics.env_steps)
        m = self.metrics
        self.progress.update(time.time() - self.clock_start, m.env_steps, m.sps, m.last_return,
                             m.last_eval, m.last_loss, scalars.get("perf/policy_lag_mean"))
        return m.env_steps >= self.config.stop.env_steps

    def _restart_dead_collectors(self) -> None:
        done, _ = ray.wait(self.run_refs, num_returns=len(self.run_refs), timeout=0)
        for ref in done:
            i = self.run_refs.index(ref)
            try:
                ray.get(ref)
                continue  # returned normally: it was asked to stop
            except ray.exceptions.RayError as err:
                reason = str(err).strip().splitlines()[0]
            self.loop_failures[i] += 1
            # A loop resubmitted while Ray is still restarting the actor fails once more; allow that.
            if self.loop_failures[i] > 2 * (COLLECTOR_MAX_RESTARTS + 1):
                raise RunFailed(f"collector {i} failed {self.loop_failures[i]} times; last error: {reason}")
            self.progress.message(f"collector {i} stopped ({reason}); restarting it on its shard")
            collector = self.actors.collectors[i]
            self.actors.learner.resend_weights.remote(collector)
            self.run_refs[i] = collector.run.remote()

    # -- the end ------------------------------------------------------------------------------
    def _checkpoint(self) -> None:
        state = ray.get(self.actors.learner.state_bytes.remote())
        counters = {"epochs": self.epochs_done, "env_steps": self.metrics.env_steps,
                    "wall_s": self._wall_s()}
        save_checkpoint(self.run_dir / "checkpoints", self.epochs_done, state, counters, self.config.checkpoint.keep)

    def _finish(self) -> None:
        if self.actors is None:
            return
        # Once the learner is told to stop, its epochs no longer wait for data, so the collectors
        # can stop now: env steps end close to stop.env_steps, not after the final evaluation.
        self.actors.learner.request_stop.remote()
        for collector in self.actors.collectors:
            collector.stop.remote()
        self.collect_end = time.time()
        self._checkpoint()
        export = self.solved_weights
        if export is None:
            # The run ended on env steps (or an interrupt): evaluate and export the final weights.
            export, version = ray.get(self.actors.learner.latest_weights.remote())
            result = ray.get(self.actors.evaluator.evaluate.remote(export, version))
            self.final_eval = result["mean"]
            self.tb.scalars(self.metrics.evaluation(result), self.metrics.env_steps)
        atomic_write(self.run_dir / "policy.pt2", ray.get(self.actors.learner.export_policy.remote(export)))
        self._poll_final()
        atomic_write(self.run_dir / "summary.json", json.dumps(self.summary(), indent=2).encode())
        self.tb.flush()

    def _poll_final(self) -> None:
        with contextlib.suppress(ray.exceptions.RayError):  # else the last successful poll stands
            self._poll()

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
            "collector_restarts": sum(self.restarts),
            "replay_size_per_shard": m.shard_sizes,
            "replay_inserted_per_shard": m.shard_inserted,
            "replay_bytes_per_transition": m.replay_bytes_per_transition,
        }

    def _kill_actors(self) -> None:
        if self.actors is None:
            return
        for actor in self.actors.all():
            ray.kill(actor, no_restart=True)
