"""How a run ends, whatever ended it: the collectors stopped, the last epochs recorded, the final
checkpoint, policy.pt2 and summary.json (the bench's runs write only the summary: `final_files`).

After a signal or a failure nothing new starts (no final evaluation: the best evaluated version
is exported); parts that need a learner that died are skipped with a line saying so, and
summary.json is written whatever happened, saying how the run ended. A learner lost while the run
ends (its node taken away) is revived from the newest checkpoint set, as during the run, to export.
"""

from __future__ import annotations

import contextlib
import time

from raypex.cluster.driver.outcome import PolicyFile
from raypex.cluster.driver.run_errors import RunFailed
from raypex.cluster.driver.tensorboard_layout import result_scalars
from raypex.cluster.storage import OutputNotWritten

EPOCH_END_S = 60  # a stopped learner ends its epoch after the current update
PRIORITY_FLUSH_S = 60  # the last GPU copies take milliseconds; a learner still in a long update finishes first


class RunEnd:
    """The end of one TrainingRun: what it writes and in which order."""

    def __init__(self, run):
        self.run = run  # the TrainingRun (cluster/driver/run.py) that is ending

    def finish(self, new_work: bool) -> RunFailed | None:
        """Stop collecting, write the final checkpoint, policy.pt2 and summary.json; returns the
        failure of a part that died meanwhile, when the run had gone well until then.

        `new_work` False (a signal, a failure) means nothing new starts: no final evaluation, and
        the exported policy is the best evaluated version (the newest weights if none was). Parts
        that need a dead learner are skipped, and the summary still says how the run ended. After a
        signal summary.json is written as soon as the checkpoint is, and again after policy.pt2.
        """
        run = self.run
        if run.actors is None:
            run.write_summary()
            return None
        for observer in run.observers:
            observer.before_finish(run)
        learner, errors = run.actors.learner, run.rt.errors
        # Once the learner is told to stop, its epochs no longer wait for data, so the collectors
        # can stop now: env steps end close to stop.env_steps, not after the final evaluation.
        run.rt.call(learner, "request_stop")
        if run.final_files:  # policy.pt2 comes last: torch.export's imports run during the steps before it
            run.rt.call(learner, "warm_exporter")
        if run.supervisor is not None:  # None: a signal came before the collectors were started
            run.supervisor.stop()
            run.collect_end = time.time()
            run.supervisor.wait_stopped()
            run.write_collector_history()  # collectors.num auto: where each collector ran, to the end
        with contextlib.suppress(*errors.any):  # a dead learner's epochs are lost with it
            run.drain_epochs(timeout_s=EPOCH_END_S)
        if run.config.replay.prioritized:  # the last updates' priorities reach the replay before it is read
            with contextlib.suppress(*errors.any):
                unsent = run.rt.get(run.rt.call(learner, "flush_priorities"), timeout=PRIORITY_FLUSH_S)
                run.metrics.priority_updates["priority_updates_unsent"] = unsent
        # A signal during the warm-up: the learner answers for its replay and state once warm (a
        # learner still being made has not taken the collectors' first chunks in yet).
        if not run.learner_warm and run.learner_warming is not None:
            with contextlib.suppress(*errors.any):
                run.rt.get(run.learner_warming, timeout=EPOCH_END_S)
                run.learner_warm, run.learner_warming = True, None
        with contextlib.suppress(*errors.any):  # the final checkpoint counts the last chunks
            self._final_counts()
        ending_failure = None
        try:
            if not run.learner_warm:  # it refuses what a checkpoint asks of it, as a dead one's replacement does
                run.progress.message("no final checkpoint or policy: the learner had not finished warming up")
            elif run.final_files:
                self._final_checkpoint_and_policy(new_work)
        except OutputNotWritten as err:
            run.not_written("no policy.pt2", err)
        except errors.any as err:
            what = run.failure_line(err)
            run.progress.message(f"no final checkpoint or policy: {what}")
            if new_work:  # the run had gone well until now: it fails, with its summary
                run.outcome.ended = f"failed: {what}"
                ending_failure = RunFailed(what)
        run.write_summary()
        run.tb.scalars(result_scalars(run.outcome.final_eval, run.outcome.time_to_solve_s), run.metrics.env_steps)
        run.tb.flush()
        try:
            run.outputs.push()  # the last TensorBoard events, at a URI
        except OutputNotWritten as err:
            run.not_written("not uploaded", err)
        return ending_failure

    def _final_checkpoint_and_policy(self, new_work: bool) -> None:
        """The final checkpoint, then policy.pt2. A learner that dies meanwhile (its node lost) is
        revived from the newest checkpoint set as during the run, once per checkpoint window, and
        exports the policy; the set it came from stays the final checkpoint."""
        run = self.run
        try:
            self._final_checkpoint()
            if not new_work:  # after a signal a SIGKILL may follow (`ray job stop`: 3 s): the summary first
                run.write_summary()
            self._export(new_work)
        except (*run.rt.errors.died, *run.rt.errors.raised) as err:
            if not run.learner_lost(err) or not run.revival.allowed(run.epochs_done):
                raise
            run.revive_learner()
            self._final_counts()
            self._export(new_work)

    def _final_counts(self) -> None:
        """The counts summary.json reports: every collector's and shard's (TrainingRun.poll, final),
        or the shards' alone when no collector was started (a restored replay's)."""
        run = self.run
        if run.supervisor is None:  # a signal came before the collectors were started
            run.metrics.poll([], run.rt.get(run.rt.call(run.actors.learner, "replay_stats"), timeout=EPOCH_END_S))
        else:
            run.poll(final=True)

    def _final_checkpoint(self) -> None:
        """The checkpoint of the epochs done (the learner is stopping: its epochs end now). One that
        cannot be written (a full disk) is said and counted, and the run still exports its policy."""
        run = self.run
        try:
            run.outputs.write_pending_checkpoint()
            # none of these epochs yet, or env steps collected since its set: the final set counts them
            if run.outputs.checkpoint_env_steps(run.epochs_done) != run.metrics.env_steps:
                run.request_checkpoint()
                run.outputs.write_pending_checkpoint()
        except OutputNotWritten as err:
            run.not_written("no final checkpoint", err)

    def _export(self, new_work: bool) -> None:
        """policy.pt2: the solving version, else the best-evaluated one (a final evaluation of the
        newest weights counts when the run ended on env steps; after a signal or a failure nothing
        new is evaluated). A resumed run keeps the policy.pt2 it found when that scored at least as
        well; with no evaluation at all, the newest weights are exported."""
        run = self.run
        outcome, learner = run.outcome, run.actors.learner
        if outcome.solved is None and new_work:  # the run ended on env steps: evaluate the final weights
            final = run.rt.call(learner, "published_weights")
            result = run.evaluations.evaluate_now(final)
            if result is not None:
                run.metrics.eval_cpu_s += result["cpu_s"]
                outcome.note_evaluation(result, final)
                run.record_result(result)
        choice = outcome.to_export()
        if choice is None and outcome.policy is not None and outcome.policy.eval_return is not None:
            best = "none" if outcome.best is None else f"{outcome.best.mean:.1f}"
            run.progress.message(f"policy.pt2 kept: it scored {outcome.policy.eval_return:.1f}; "
                                 f"this run's best evaluation: {best}")
            return
        if choice is None:  # nothing evaluated: the newest weights, unevaluated
            outcome.policy = PolicyFile(None, None)
            run.outputs.policy(learner, run.rt.call(learner, "published_weights"))
            return
        if not new_work or choice.mean != outcome.final_eval:
            run.progress.message(f"exporting weights version {choice.version}, the best evaluated ({choice.mean:.1f})")
        outcome.policy = PolicyFile(choice.mean, choice.version)
        run.outputs.policy(learner, choice.weights)
