"""How a run ends: collectors stopped, the final checkpoint, policy.pt2 and summary.json (the
bench's runs write only the summary: TrainingRun's `final_files`).

After a signal or a failure nothing new starts (no final evaluation: the best evaluated version
is exported); parts that need a learner that died are skipped with a line saying so, and
summary.json is written whatever happened, saying how the run ended.
"""

from __future__ import annotations

import contextlib
import time

from cluster.driver.checkpoints import OutputNotWritten
from cluster.driver.outcome import PolicyFile
from cluster.driver.run_errors import describe_failure
from cluster.driver.tensorboard_layout import result_scalars

EPOCH_END_S = 60  # a stopped learner ends its epoch after the current update
PRIORITY_FLUSH_S = 60  # the last GPU copies take milliseconds; a learner still in a long update finishes first


def finish_run(run, new_work: bool) -> None:
    """Stop collecting, write the final checkpoint, policy.pt2 and summary.json.

    `new_work` False (a signal, a failure) means nothing new starts: no final evaluation, and
    the exported policy is the best evaluated version (the newest weights if none was). Parts
    that need a dead learner are skipped, and the summary still says how the run ended. After a
    signal summary.json is written as soon as the checkpoint is, and again after policy.pt2.
    """
    if run.actors is None:
        _write_summary(run, run.summary())
        return
    for observer in run.observers:
        observer.before_finish(run)
    # Once the learner is told to stop, its epochs no longer wait for data, so the collectors
    # can stop now: env steps end close to stop.env_steps, not after the final evaluation.
    run.actors.learner.request_stop.remote()
    if run.final_files:  # policy.pt2 comes last: torch.export's imports run during the steps before it
        run.actors.learner.warm_exporter.remote()
    collecting = run.supervisor is not None  # None: a signal came before the collectors were started
    if collecting:
        run.supervisor.stop()
        run.collect_end = time.time()
        run.supervisor.wait_stopped()
    rt = run.rt
    with contextlib.suppress(*rt.errors.any):  # a dead learner's epochs are lost with it
        run.drain_epochs(timeout_s=EPOCH_END_S)
    if run.config.replay.prioritized:  # the last updates' priorities reach the replay before it is read
        with contextlib.suppress(*rt.errors.any):
            unsent = rt.get(run.actors.learner.flush_priorities.remote(), timeout=PRIORITY_FLUSH_S)
            run.metrics.priority_updates["priority_updates_unsent"] = unsent
    with contextlib.suppress(*rt.errors.any):  # the final checkpoint counts the last chunks
        if collecting:
            run.poll(final=True)
        else:  # a restored replay's counts still go to summary.json
            run.metrics.poll([], rt.get(run.actors.learner.replay_stats.remote(), timeout=EPOCH_END_S))
    try:
        if run.final_files:
            _final_checkpoint(run)
            if not new_work:  # after a signal a SIGKILL may follow (`ray job stop`: 3 s): the summary first
                _write_summary(run, run.summary())
            _export(run, new_work)
    except OutputNotWritten as err:
        _not_written(run, "no policy.pt2", err)
    except rt.errors.any as err:
        if new_work:
            raise
        run.progress.message(f"no final checkpoint or policy: {describe_failure(err, run.role_of, rt.errors.died)}")
    _last_words(run)


def _last_words(run) -> None:
    """summary.json, and the run's result in TensorBoard."""
    summary = run.summary()
    _write_summary(run, summary)
    run.tb.scalars(result_scalars(summary["final_eval_return"], summary["time_to_solve_s"]), run.metrics.env_steps)
    run.tb.flush()


def _final_checkpoint(run) -> None:
    """The checkpoint of the epochs done (the learner is stopping: its epochs end now). One that
    cannot be written (a full disk) is said and counted, and the run still exports its policy."""
    try:
        run.outputs.write_pending_checkpoint()
        run.request_checkpoint()
        run.outputs.write_pending_checkpoint()
    except OutputNotWritten as err:
        _not_written(run, "no final checkpoint", err)


def _write_summary(run, summary: dict) -> None:
    try:
        run.outputs.summary(summary)
    except OutputNotWritten as err:
        _not_written(run, "no summary.json", err)


def _not_written(run, what: str, err: OutputNotWritten) -> None:
    """Say what the run's end could not write; the first such makes the run exit as failed."""
    run.progress.message(f"{what}: {err}")
    run.outputs.unwritten = run.outputs.unwritten or str(err)


def _export(run, new_work: bool) -> None:
    """policy.pt2: the solving version, else the best-evaluated one (a final evaluation of the
    newest weights counts when the run ended on env steps; after a signal or a failure nothing
    new is evaluated). A resumed run keeps the policy.pt2 it found when that scored at least as
    well; with no evaluation at all, the newest weights are exported."""
    outcome = run.outcome
    if outcome.solved is None and new_work:  # the run ended on env steps: evaluate the final weights
        final = run.actors.learner.published_weights.remote()
        result = run.evaluations.evaluate_now(final)
        if result is not None:
            outcome.note_evaluation(result, final)
            run.tb.scalars(run.metrics.evaluation(result), run.metrics.env_steps)
    choice = outcome.to_export()
    if choice is None and outcome.policy is not None and outcome.policy.eval_return is not None:
        best = "none" if outcome.best is None else f"{outcome.best.mean:.1f}"
        run.progress.message(f"policy.pt2 kept: it scored {outcome.policy.eval_return:.1f}; this run's best evaluation: {best}")
        return
    if choice is None:  # nothing evaluated: the newest weights, unevaluated
        outcome.policy = PolicyFile(None, None)
        run.outputs.policy(run.actors.learner, run.actors.learner.published_weights.remote())
        return
    if not new_work or choice.mean != outcome.final_eval:
        run.progress.message(f"exporting weights version {choice.version}, the best evaluated ({choice.mean:.1f})")
    outcome.policy = PolicyFile(choice.mean, choice.version)
    run.outputs.policy(run.actors.learner, choice.weights)
