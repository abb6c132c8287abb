"""The driver's run loop: epochs, polling, TensorBoard, checkpoints, stop conditions, shutdown.

The driver is never on the data path. It keeps two `train_epoch` calls queued on the learner (so
the learner never idles between epochs), hands the newest published weights to the evaluator
every `eval.every_env_steps` env steps (one evaluation at a time, while the learner keeps training),
reads every actor's counters a few times a second, writes all TensorBoard scalars, restarts
collector loops after Ray restarted a dead collector, and ends the run on `stop.env_steps` or
`stop.wall_s`, on an evaluation reaching `stop.eval_return`, on Ctrl-C or SIGTERM (final checkpoint, TensorBoard
flushed, actors killed, exit code 130 or 143), or on an actor's death it cannot recover from
(RunFailed, after the same final files). It exports the version the deciding evaluation ran on.

How a run ends is the same whatever ended it: cluster/driver/run_end.py.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from pathlib import Path
from typing import NamedTuple

from raypex.actors.envs import EnvSpec, UnsupportedEnv
from raypex.actors.step_check import EnvWentBad
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.driver.checkpoints import ResumePoint
from raypex.cluster.driver.evaluation import EvaluationScheduler
from raypex.cluster.driver.metrics import RunMetrics
from raypex.cluster.driver.observer import RunObserver
from raypex.cluster.driver.outcome import PolicyFile, RunOutcome
from raypex.cluster.driver.outputs import RunOutputs
from raypex.cluster.driver.progress import ProgressLine, learner_ready_line
from raypex.cluster.driver.remote_run import RemoteRun
from raypex.cluster.driver.revival import LearnerRevival, restore_replay, warmed_up
from raypex.cluster.driver.run_end import RunEnd
from raypex.cluster.driver.run_errors import (
    CheckpointRefused,
    RunFailed,
    StartRefused,
    describe_failure,
    original_error,
    raised_at,
    traceback_text,
)
from raypex.cluster.driver.runtime import Runtime
from raypex.cluster.driver.signals import StopAsked, exit_code, release, second_aborts, signal_name
from raypex.cluster.driver.startup import StartupTimeline
from raypex.cluster.driver.tensorboard_layout import custom_layout, hparams_summaries
from raypex.cluster.driver.tensorboard_log import TensorBoardLog
from raypex.cluster.driver.video import video_summary, write_video
from raypex.cluster.hosts.learner_host import refused_by_a_restarted_learner
from raypex.cluster.plan.env_fit import replay_line
from raypex.cluster.plan.settings import eval_give_up
from raypex.cluster.storage import OutputNotWritten
from raypex.replay.contracts import CollectorStats, EpochStats
from raypex.replay.sharded import prior_count

POLL_EVERY_S = 0.5
STATS_WAIT_S = 5.0  # how long a poll waits for every actor's counters before reading them again at the next
EPOCHS_QUEUED = 2


class QueuedEpoch(NamedTuple):
    """An epoch asked of the learner, not yet recorded."""

    epoch: int
    result: object  # the pending train_epoch call


class TrainingRun:
    """One training run, its parts in a runtime (cluster/driver/runtime.py: Ray actors, or objects
    in this process).

    It composes the driver's jobs: the collectors' supervisor, EvaluationScheduler (evaluations),
    RunOutputs (the run directory's files), RunMetrics and TensorBoardLog; what it does itself is
    the loop that paces epochs and decides when the run ends.
    """

    def __init__(self, config: RunConfig, spec: EnvSpec, run_dir: Path, runtime: Runtime,
                 clock_start: float, progress: ProgressLine, resume: ResumePoint | None = None,
                 observers: tuple[RunObserver, ...] = (), kept_policy: PolicyFile | None = None,
                 final_files: bool = True, startup: StartupTimeline | None = None, remote: RemoteRun | None = None):
        self.config, self.spec, self.rt = config, spec, runtime
        self.final_files = final_files  # False (the bench's runs): no final eval, checkpoint or policy.pt2
        self.clock_start = clock_start  # wall clock (time.time) at the command's start
        self.progress, self.resume, self.observers = progress, resume, observers
        # `startup`: the command's timeline, its env check already marked
        self.metrics = RunMetrics(resume.env_steps if resume else 0, startup or StartupTimeline(clock_start))
        # a resumed line's newest evaluation until it evaluates again: what a PBT trial reports is its
        # line's, not -inf (which ranks it last, so an exploited trial would be exploited at once again)
        self.metrics.last_eval = resume.eval_return if resume else None
        self.tb = TensorBoardLog(run_dir / "tensorboard")
        self.outputs = RunOutputs(run_dir, config.checkpoint.keep, runtime, progress.message, remote)
        self.epochs_done = resume.epochs if resume else 0
        self.outcome = RunOutcome(config.stop.eval_return, clock_start, kept_policy)
        self.revival = LearnerRevival(runtime, run_dir / "checkpoints", config.checkpoint.every_epochs,
                                      config.collectors.shards, config.checkpoint.replay, len(spec.obs_shape) != 1,
                                      progress.message, remote.replay_dir() if remote else None)
        self.collect_start: float | None = None  # when the learner was ready; collect_end: collectors told to stop
        self.collect_end: float | None = None
        self.actors = None  # the runtime's RunParts, once started
        # Whether the learner process answers for its state: a signal may end the run before its
        # warm-up was asked for, or while it (or a revived learner's) runs; `learner_warming` is
        # the asked warm-up's answer until it has come.
        self.learner_warm, self.learner_warming = False, None
        self.placement: dict = {}  # placement.json: where each part runs
        self.last_collector_stats: dict[int, object] = {}  # each collector's newest counters (CollectorStats)
        self.collectors_over_time: list[list[float]] = []  # [wall s, collectors collecting] at each change
        self.supervisor, self.evaluations = None, None  # the collectors' supervisor, EvaluationScheduler: made by _start
        self.queued_epochs: deque[QueuedEpoch] = deque()
        # what a resumed run's learner holds once restored (replay/digest.py): its weights, each shard
        self.restored_weights: str | None = None
        self.restored_replay: list[str] = []
        self.prior_transitions = 0  # replay.prior's, as the learner holds them

    # -- lifecycle ----------------------------------------------------------------------------
    def execute(self, config_text: str) -> int:
        """Start the parts, run to the end; returns the exit code (0, or 130/143 after SIGINT or
        SIGTERM, from whenever it came). Raises RunFailed, after the final files, when a part died
        in a way the run cannot recover; StartRefused (nothing started) when the runtime cannot
        start the run as configured. The runtime is closed however it ends."""
        interrupt, failure = None, None  # the signal (KeyboardInterrupt) or RunFailed that ended the run
        try:
            try:  # from the line below on, a signal ends the run with its final files
                release()  # one that came while `raypex train` made the run (its `hold`) is raised here
                self.tb.text("config", config_text)
                for summary in [custom_layout(), *hparams_summaries(self.config, self.outputs.run_dir.name)]:
                    self.tb.summary(summary)
                self._start()
                self._loop()
            except (UnsupportedEnv, CheckpointRefused, StartRefused):  # no final files: they would replace what the run found
                self.tb.discard()
                raise
            except StopAsked as asked:
                interrupt = asked
                self.outcome.ended = asked.ended
                self.progress.message(f"{asked.ended}: writing a final checkpoint and stopping")
            except KeyboardInterrupt as caught:
                interrupt = caught
                self.outcome.ended = "terminated" if signal_name(caught) == "SIGTERM" else "interrupted"
                self.progress.message(f"{signal_name(caught)}: writing a final checkpoint and stopping "
                                      "(send it again to abort at once)")
            except (RunFailed, *self.rt.errors.any, OutputNotWritten) as err:  # not written: a full disk, say
                raised = isinstance(err, self.rt.errors.raised)
                # an error your code raised, or an env that went bad, would meet a resumed run again
                repeats = raised and (raised_at(err) or isinstance(original_error(err), EnvWentBad))
                failure = err if isinstance(err, RunFailed) else RunFailed(
                    describe_failure(err, self.role_of, self.rt.errors.died),
                    traceback_text(err) if raised else None, resumable=not repeats)
                self.outcome.ended = f"failed: {failure}"
            self.progress.finish()
            try:
                with second_aborts():
                    failure = RunEnd(self).finish(new_work=interrupt is None and failure is None) or failure
            except KeyboardInterrupt as again:  # a signal during the end: no more waiting, only the summary
                interrupt = interrupt or again
                self.outcome.ended = f"{self.outcome.ended or 'interrupted'}, then aborted"
                self.outputs.summary(self.summary())
            self.tb.close()
        finally:
            self.rt.close()
        if failure is None and self.outputs.unwritten:  # ended well, but its final files are not all there
            failure = RunFailed(self.outputs.unwritten)
        if failure is not None:
            if failure.details:
                failure.log = self.outputs.error_log(failure.details)
            raise failure
        return exit_code(interrupt) if interrupt is not None else 0

    def _start(self) -> None:
        self.actors = self.rt.start(self.config, self.spec, self.progress, self.metrics.startup,
                                    self.metrics.env_steps_offset)
        self.learner_warming = self.rt.call(self.actors.learner, "warmup",
                                            self.resume.learner_state if self.resume else None)
        run_dir = self.outputs.run_dir  # said once the run is sure to use it
        if self.outputs.remote is not None:
            self.progress.message(f"run directory: {self.outputs.remote.uri}, the learner writing replay there and "
                                  f"this driver its other files from a copy uploaded as it goes, {run_dir}, removed "
                                  f"at the end  (tensorboard --logdir {run_dir / 'tensorboard'} while it runs)")
        else:
            self.progress.message(f"run directory: {run_dir}  (tensorboard --logdir {run_dir / 'tensorboard'})")
        self.supervisor = self.rt.supervisor(self.actors, self.progress, self.reported_env_steps)
        self.evaluations = EvaluationScheduler(self.rt, self.actors.evaluator, self.config.eval.every_env_steps,
                                               self.config.eval.every_s, eval_give_up(self.config),
                                               lambda: self.rt.call(self.actors.learner, "published_weights"),
                                               self.config.eval.video_every)
        if self.resume and self.resume.replay_files:
            restored = restore_replay(self.rt, self.actors.learner, self.config.collectors.shards, self.resume)
            self.restored_replay = restored.digests
            self.progress.message(restored.line)
        # The collectors start at once (an MLP's at random, a CNN's with its own initial network,
        # until the learner publishes): replay reaches min_size while the learner warms up,
        # and the limiter stops them min_size + error_buffer transitions later.
        self.supervisor.start()
        self.metrics.startup.learner(info := warmed_up(self.rt, self.learner_warming, restoring=self.resume is not None))
        self.learner_warm, self.learner_warming = True, None
        # estimated and checked before anything started (fit_run); said once the learner holds it
        self.progress.message(replay_line(self.config, self.spec, info["replay_storage"]))
        self.restored_weights = info.get("weights_sha256")
        if info.get("replay_notice"):
            self.progress.message(info["replay_notice"])
        self.prior_transitions = info.get("prior_transitions", 0)
        if self.config.replay.prior is not None:
            self.progress.message(f"replay.prior: {self.prior_transitions} transitions of {self.config.replay.prior}, "
                                  f"{self.config.replay.prior_fraction:.0%} of each batch")
        self.collect_start = time.time()  # throughput is counted from here, with the learner ready
        self.progress.message(learner_ready_line(info, self.config.collectors, self.config.env.num_envs,
                                                 self.config.learner.num))
        self.metrics.learner_version = info["version"]
        self.placement = self.actors.placement()
        self.outputs.placement(self.placement)

    def _loop(self) -> None:
        learner, evaluations, queued = self.actors.learner, self.evaluations, self.queued_epochs
        next_epoch, stopping, next_poll = self.epochs_done + 1, False, time.perf_counter()
        while True:
            while not stopping and len(queued) < EPOCHS_QUEUED:
                queued.append(QueuedEpoch(next_epoch, self.rt.call(learner, "train_epoch")))
                next_epoch += 1
            if not queued:
                return
            checkpoint_refs = self.outputs.unready_checkpoint_refs()
            waiting = [queued[0].result] + ([evaluations.pending] if evaluations.pending else []) + checkpoint_refs
            timeout = max(0.0, next_poll - time.perf_counter())
            ready = self.rt.wait(waiting, num_returns=1, timeout=timeout)
            finished = evaluations.pending is not None and evaluations.pending in ready
            if finished and self.on_evaluation():
                stopping = self._stop_learning()
            epoch_recorded = False
            try:
                if self.outputs.checkpoint_ready():  # its last part has come
                    self.outputs.write_pending_checkpoint()
                epoch_recorded = queued[0].result in ready
                if epoch_recorded:
                    epoch, ref = queued.popleft()
                    self._on_epoch(epoch, self.rt.get(ref))
            except (*self.rt.errors.died, *self.rt.errors.raised) as err:  # the learner died: a new one, or the end
                if not self.learner_lost(err) or stopping or not self.revival.allowed(self.epochs_done):
                    if refused_by_a_restarted_learner(err):  # say what died
                        raise RunFailed(self.failure_line(err)) from err
                    raise
                self.revive_learner()
                next_epoch = self.epochs_done + 1
                queued.clear()
                continue
            if not stopping:
                evaluations.maybe_start()
            if time.perf_counter() >= next_poll or epoch_recorded and self.rt.polls_every_epoch:
                next_poll = time.perf_counter() + POLL_EVERY_S
                if self.poll() and not stopping:
                    self.outcome.ended = self.outcome.ended or self.limit_reached()
                    stopping = self._stop_learning()

    def end_soon(self, reason: str) -> None:
        """End the run at the next poll, as stop.env_steps does (the soak's timer, the API's stop)."""
        self.outcome.ended = reason

    def drain_epochs(self, timeout_s: float) -> None:
        """Record the epochs still queued when a signal or a failure left the loop (the learner, told
        to stop, ends them at once): their updates were made, so the counts and the curves keep them."""
        while self.queued_epochs:
            epoch, ref = self.queued_epochs.popleft()
            self._on_epoch(epoch, self.rt.get(ref, timeout=timeout_s))

    def learner_lost(self, err: Exception) -> bool:
        """Whether `err` says the learner process died: Ray's own error, or the refusal of the
        process Ray restarted in its place (refused_by_a_restarted_learner)."""
        if refused_by_a_restarted_learner(err):
            return True
        return isinstance(err, self.rt.errors.died) and self.role_of(err.actor_id) == "the learner"

    def failure_line(self, err: Exception) -> str:
        """One line for an error that ends the run (describe_failure), the refusal of a learner
        process Ray restarted in place of a dead one said as the learner's death."""
        if refused_by_a_restarted_learner(err):
            return "the learner died"
        return describe_failure(err, self.role_of, self.rt.errors.died)

    def revive_learner(self) -> None:
        """Carry on with the process Ray restarted for a dead learner, from the newest checkpoint."""
        self.outputs.drop_pending_checkpoint()  # asked of the dead learner: never coming
        self.evaluations.forget_weights()  # refs to the dead process's objects went with it
        self.outcome.forget_weights()
        self.learner_warm = False
        revived = self.revival.revive(self.actors.learner, self.epochs_done, self.metrics.learner_version)
        self.learner_warm = True
        self.epochs_done = revived.epochs
        self.metrics.learner_version = revived.version
        if self.config.collectors.elastic:  # the new process announces to no collector until told who has joined
            for i in self.supervisor.answering():
                self.rt.call(self.actors.learner, "resend_weights", i)
        self.placement = {**self.placement, **self.actors.learner_placement()}  # Ray may have moved it
        self.outputs.placement(self.placement)

    def _stop_learning(self) -> bool:  # cut the learner's current and queued epochs short
        self.rt.call(self.actors.learner, "request_stop")
        return True

    def _on_epoch(self, epoch: int, m: EpochStats) -> None:
        """Record one epoch's metrics, tell the observers; note its weights for evaluation; checkpoint when due."""
        if m.updates_in_epoch == 0:
            return  # cut before its first update: the run is stopping
        self.epochs_done = epoch
        self.tb.scalars(scalars := self.metrics.epoch(m), self.metrics.env_steps)
        self.evaluations.on_epoch()
        self.evaluations.on_env_steps(self.metrics.env_steps)
        for observer in self.observers:
            observer.after_epoch(self, epoch, scalars)
        if epoch % self.config.checkpoint.every_epochs == 0:
            self.request_checkpoint()

    def on_evaluation(self) -> bool:
        """Record the evaluation that has just finished; True when it reached stop.eval_return."""
        result, weights_ref, taken = self.evaluations.take()
        if result is None:
            self.progress.message("an evaluation was lost (the evaluator died, or the learner it took weights from); "
                                  "the next one runs as usual")
            return False
        self.metrics.eval_cpu_s += result["cpu_s"]
        if not result["complete"]:
            return False  # gave up: the target was out of reach
        self.record_result(result)
        if not self.outcome.record_evaluation(result, weights_ref, self.metrics.env_steps, taken):
            return False
        self.progress.message(
            f"solved: eval return {result['mean']:.1f} >= {self.outcome.target:g} (weights version "
            f"{result['version']}, taken at {taken.env_steps} env steps) after {self.outcome.time_to_solve_s:.1f}s "
            f"and {self.metrics.env_steps} env steps ({self.outcome.solve_seen_after_s:.1f}s after taking them)")
        return True

    def record_result(self, result: dict) -> None:
        """Write a finished evaluation's scalars (and video), and tell the observers."""
        self.tb.scalars(self.metrics.evaluation(result), self.metrics.env_steps)
        if "video" in result:
            path = write_video(self.outputs.run_dir, result["version"], result["video"])
            self.tb.summary(video_summary("eval/video", result["video"]), self.metrics.env_steps)
            self.progress.message(f"video of weights version {result['version']}: {path}")
        for observer in self.observers:
            observer.after_evaluation(self, result)

    def poll(self, final: bool = False) -> bool:
        """Read every actor's counters, write scalars, draw progress; True when env steps are done.
        `final` (the run's end, the collectors stopped): a collector that cannot answer (dead for
        good) is counted from its shard, so the summary's counts are the final ones; after a learner
        was revived, what a shard does not hold of its collector's count went to a process that died
        (a replacement learns of it only from that collector's next chunk, and there is none now),
        and counts as lost."""
        self.supervisor.check()
        answering = self.supervisor.answering()
        collectors = self.actors.collectors
        refs = [self.rt.call(collectors[i], "stats") for i in answering]
        refs.append(self.rt.call(self.actors.learner, "replay_stats"))
        ready = self.rt.wait(refs, num_returns=len(refs), timeout=STATS_WAIT_S)
        if not final:
            self.supervisor.check_answers(answering, [ref in ready for ref in refs[:-1]], STATS_WAIT_S,
                                          self.config.env.step_timeout_s, self.config.env.id)
        if len(ready) < len(refs):
            if not final or refs[-1] not in ready:
                return False  # an actor is slow to answer; read everything again on the next poll
            answered = [ref in ready for ref in refs[:-1]]
            answering = self.supervisor.count_out_silent(answering, answered)
            refs = [ref for ref, came in zip(refs[:-1], answered, strict=True) if came] + [refs[-1]]
        try:
            stats = self.rt.get(refs)
        except self.rt.errors.restarting:
            if not final:
                return False  # a collector or the learner is being restarted by Ray; read again next poll
            stats = [self.rt.get(refs[-1])]  # the shards alone (RunMetrics.poll counts each collector there)
        if not final:  # at the end a hung collector has ended the run already: its counts are read all the same
            self.supervisor.check_env_steps(stats[:-1], self.config.env.step_timeout_s, self.config.env.id)
        collector_stats, shard_stats = self._every_collector(answering, stats[:-1]), stats[-1]
        revived = final and self.revival.count > 0
        gone = frozenset(range(len(collectors))) if revived else frozenset(self.supervisor.gone)
        scalars = self.metrics.poll(collector_stats, shard_stats, gone=gone)
        scalars["perf/collectors"] = collecting = len(answering)
        if not final:
            self._count_collectors(collecting)
        self.evaluations.on_env_steps(self.metrics.env_steps)
        self.tb.scalars(scalars, self.metrics.env_steps)
        m, stop = self.metrics, self.config.stop
        replay, min_size = sum(m.shard_sizes), self.config.replay.min_size
        self.progress.update(time.time() - self.clock_start, m.env_steps, m.sps, m.last_return, m.last_eval,
                             m.last_loss, scalars.get("perf/policy_lag_mean"), stop.env_steps,
                             (replay, min_size) if m.last_loss is None and replay < min_size else None,
                             stopping=self.collect_end is not None, may_solve=self.outcome.target is not None,
                             collectors=collecting if self.config.collectors.elastic else None,
                             time_limit=None if stop.wall_s is None else (self._wall_s(), stop.wall_s))
        for observer in self.observers:
            observer.after_poll(self)
        return self.limit_reached() is not None or self.outcome.ended is not None

    def limit_reached(self) -> str | None:
        """The stop.* limit the run has reached ("env_steps", "wall_s"), or None."""
        if self.metrics.env_steps >= self.config.stop.env_steps:
            return "env_steps"
        if self.config.stop.wall_s is not None and self._wall_s() >= self.config.stop.wall_s:
            return "wall_s"
        return None

    def _every_collector(self, answering: list[int], answers: list) -> list:
        """Every collector's counters, in order: the answers of those `answering`, and for one
        counted out (its node lost) its last answer, its episodes already read; [] when one of those
        never answered (the shards alone count then). A slot without a collector (collectors.num
        auto) stands in with its last one's counters, or none, as acting with no weights."""
        if not answers:  # the run's end, with a collector dead for good: the shards alone count
            if not self.supervisor.absent:
                return []
            answering = []  # (collectors.num auto: every slot stands in)
        for i, answer in zip(answering, answers, strict=True):
            self.last_collector_stats[i] = answer
        if len(answering) == len(self.actors.collectors):
            return answers
        absent = self.supervisor.absent
        if any(i not in self.last_collector_stats and i not in absent for i in range(len(self.actors.collectors))):
            return []
        by_index = dict(zip(answering, answers, strict=True))
        every = []
        for i in range(len(self.actors.collectors)):
            if i in by_index:
                every.append(by_index[i])
            elif i in self.last_collector_stats:
                every.append(dataclasses.replace(self.last_collector_stats[i], episode_returns=[], episode_lengths=[],
                                                 env_step_running_s=0.0,
                                                 version=-1 if i in absent else self.last_collector_stats[i].version))
            else:
                every.append(CollectorStats.idle(i))
        return every

    def reported_env_steps(self, i: int) -> int:
        """The env steps collector i last reported (0: it never did)."""
        stats = self.last_collector_stats.get(i)
        return stats.env_steps if stats is not None else 0

    def _count_collectors(self, collecting: int) -> None:
        """Note a change in how many collectors collect (summary.json; placement.json's history)."""
        if self.collectors_over_time and self.collectors_over_time[-1][1] == collecting:
            return
        self.collectors_over_time.append([round(self._wall_s(), 3), collecting])
        self.write_collector_history()

    def write_collector_history(self) -> None:
        """placement.json with where each collector ran so far (collectors.num auto; the supervisor
        keeps the history, so nothing is asked of the actors, one of which may be restarting)."""
        if self.actors.collector_history:
            self.placement = {**self.placement, "collector_history": self.actors.collector_history}
            self.outputs.placement(self.placement)

    def request_checkpoint(self) -> None:
        """Ask the learner for a checkpoint of the epochs done so far (written once it comes)."""
        counters = {"epochs": self.epochs_done, "env_steps": self.metrics.env_steps, "wall_s": self._wall_s(),
                    "eval_return": self.metrics.last_eval}
        shards = self.config.collectors.shards if self.config.checkpoint.replay else 0
        self.outputs.request_checkpoint(self.actors.learner, self.epochs_done, counters, shards)

    def role_of(self, actor_id: str | None) -> str:
        """What the actor with this id is in the run: "collector 1", "the learner", ..."""
        return self.actors.role_of(actor_id) if self.actors else "an actor of the run"

    def _wall_s(self) -> float:
        return (self.resume.wall_s if self.resume else 0.0) + time.time() - self.clock_start

    def summary(self) -> dict:
        """What summary.json holds."""
        end = self.collect_end or time.time()
        collect_s = end - self.collect_start if self.collect_start else None
        return {
            "env_id": self.config.env.id,
            "seed": self.config.seed,
            "wall_s": round(self._wall_s(), 3),
            **self.metrics.summary_fields(collect_s),
            **self.outcome.fields(),
            "epochs": self.epochs_done,
            "evaluations_lost": self.evaluations.lost if self.evaluations else 0,
            "collector_restarts": self.metrics.collector_restarts,
            "collectors_over_time": self.collectors_over_time,
            "learner_restarts": self.revival.count,
            "replay_checkpoint_pause_s_max": round(self.outputs.replay_pause_s_max, 4),
            "checkpoint_s_max": round(self.outputs.checkpoint_s_max, 3),
            **self._prior_fields(),
        }

    def _prior_fields(self) -> dict:
        """replay.prior's counts, apart from the shards' (every draw takes the same share of them)."""
        if self.config.replay.prior is None:
            return {}
        batch = self.config.learner.micro_batch * self.config.learner.accumulation_steps
        per_draw = prior_count(batch, self.config.replay.prior_fraction)
        return {"replay_prior_transitions": self.prior_transitions,
                "learner_prior_samples": self.metrics.learner_samples // batch * per_draw}

    def write_summary(self) -> None:
        try:
            self.outputs.summary(self.summary())
        except OutputNotWritten as err:
            self.not_written("no summary.json", err)

    def not_written(self, what: str, err: OutputNotWritten) -> None:
        """Say what the run's end could not write; the first such makes the run exit as failed."""
        self.progress.message(f"{what}: {err}")
        self.outputs.unwritten = self.outputs.unwritten or str(err)
