"""The head start's handover: when a run's learner actor is built, the training the driver's forked
process did while the cluster started (cluster/local/head_start.py) goes into it, as a resume's
checkpoint does: the learner's state, every shard's replay, the env steps and the epochs, and its
own evaluations (one that reached stop.eval_return is the run's solve, at the moment it finished).
"""

from __future__ import annotations

import contextlib
import time

import ray

from cluster.driver.revival import load_replay_states, warmed_up
from cluster.local.head_start import HeadStartResult

HANDOVER_TIMEOUT_S = 60.0  # an epoch of an MLP takes well under a second; this is for a stuck process


def hand_over(run) -> HeadStartResult | None:
    """Wait until the run's learner actor is built, then take what `run.head_start` made and load it
    into the learner's replay; None (and a line saying why) when it made nothing. The caller sends
    `learner_state` with the learner's warm-up. A head start that solved the run has solved it
    (take_head_start records it), and the run stops at its first poll."""
    ray.get(run.actors.learner.__ray_ready__.remote())
    return _take(run)


def hand_over_before_stopping(run) -> None:
    """Ctrl-C or SIGTERM came before the handover: the learner still takes the head start's training
    and warms up from it, so that the run's final checkpoint holds it (a second signal aborts, as
    everywhere). Nothing to do when the handover was made, or no actor was asked for yet."""
    if run.head_start is None or run.actors is None:
        return
    with contextlib.suppress(ray.exceptions.RayError):  # a learner that died first: the run's end says so
        result = hand_over(run)
        if result is not None:
            warmed_up(run.actors.learner.warmup.remote(take_head_start(run, result)), restoring=False)


def _take(run) -> HeadStartResult | None:
    result = run.head_start.hand_over(HANDOVER_TIMEOUT_S)
    run.head_start = None  # taken, whatever it made
    if result.error is not None:
        run.progress.message(f"the head start failed ({result.error}); training starts from the actors' own start")
        return None
    load_replay_states(run.actors.learner, result.replay_states)
    run.progress.message(f"head start: {result.updates} updates on {result.env_steps} env steps while Ray and the "
                         "actors started; the learner goes on from them")
    return result


def take_head_start(run, result: HeadStartResult) -> bytes:
    """Count what the head start did as the run's own: its env steps and epochs go on, its loss
    curve and evaluations go to TensorBoard, its solving evaluation (if any) solves the run, its
    first env step and update are the run's start-up moments (summary.json's `head_start` says how
    much of the run it was). Returns the learner state for the learner actor's warm-up."""
    run.metrics.env_steps_offset = run.metrics.env_steps = result.env_steps
    run.metrics.head_start = {"env_steps": result.env_steps, "updates": result.updates, "epochs": result.epochs}
    run.epochs_done = result.epochs
    startup = run.metrics.startup
    startup.mark("first_env_step", result.first_step_at)
    startup.mark("first_update", result.first_update_at)
    startup.mark("handed_over", time.time())
    for env_steps, td_loss, q_values in result.curve:
        run.tb.scalars({"losses/td_loss": td_loss, "losses/q_values": q_values}, env_steps)
    for _, env_steps, evaluation in result.evaluations:
        run.tb.scalars(run.metrics.evaluation(evaluation), env_steps)
    if result.solved is not None:
        finished_at, env_steps, evaluation = result.solved
        if result.policy:
            run.outcome.ready_policy = (evaluation["version"], result.policy)
        if run.outcome.record_evaluation(evaluation, ray.put(result.weights), env_steps, finished_at):
            run.progress.message(
                f"solved in the head start: eval return {evaluation['mean']:.1f} >= {run.outcome.target:g} (weights "
                f"version {evaluation['version']}) after {run.outcome.time_to_solve_s:.1f}s and {env_steps} env steps")
    return result.learner_state
