"""How a run ends: collectors stopped, the final checkpoint, policy.pt2 and summary.json.

After a signal or a failure nothing new starts (no final evaluation: the last evaluated version
is exported); parts that need a learner that died are skipped with a line saying so, and
summary.json is written whatever happened, saying how the run ended.
"""

from __future__ import annotations

import contextlib
import time

import ray

from cluster.driver.supervisor import describe_failure


def finish_run(run, new_work: bool) -> None:
    """Stop collecting, write the final checkpoint, policy.pt2 and summary.json.

    `new_work` False (a signal, a failure) means nothing new starts: no final evaluation, and
    the exported policy is the last evaluated version (the newest weights if none was). Parts
    that need a dead learner are skipped, and the summary still says how the run ended.
    """
    if run.actors is None:
        run.outputs.summary(run.summary())
        return
    for observer in run.observers:
        observer.before_finish(run)
    # Once the learner is told to stop, its epochs no longer wait for data, so the collectors
    # can stop now: env steps end close to stop.env_steps, not after the final evaluation.
    run.actors.learner.request_stop.remote()
    run.supervisor.stop()
    run.collect_end = time.time()
    try:
        run.outputs.write_pending_checkpoint()  # the learner is stopping: its epochs end now
        run.request_checkpoint()
        run.outputs.write_pending_checkpoint()
        _export(run, new_work)
    except ray.exceptions.RayError as err:
        if new_work:
            raise
        run.progress.message(f"no final checkpoint or policy: {describe_failure(err, run.role_of)}")
    with contextlib.suppress(ray.exceptions.RayError):  # else the last successful poll stands
        run.poll()
    run.outputs.summary(run.summary())
    run.tb.flush()


def _export(run, new_work: bool) -> None:
    """policy.pt2: the solving version, else a final evaluation's (or, with no new work, the
    last evaluated version)."""
    export = run.outcome.solved_weights
    if export is None and not new_work and run.outcome.last_evaluated is not None:
        export, version = run.outcome.last_evaluated
        run.progress.message(f"exporting weights version {version}, the last evaluated")
    if export is None:
        export = run.actors.learner.published_weights.remote()
        if new_work:  # the run ended on env steps: evaluate and export the final weights
            result = run.evaluations.evaluate_now(export)
            if result is not None:
                run.outcome.final_eval = result["mean"]
                run.tb.scalars(run.metrics.evaluation(result), run.metrics.env_steps)
    run.outputs.policy(run.actors.learner, export)
