"""The head start's handover: when a run's learner actor is built, the training the driver's forked
process did while the cluster started (cluster/local/head_start.py) goes into it, as a resume's
checkpoint does: the learner's state, every shard's replay, the env steps and the epochs, and its
own evaluations (one that reached stop.eval_return is the run's solve, at the moment it finished).

A head start that solved the run before its learner actor was built leaves the actors nothing to
do: the run ends without them, its final files written from what the head start made
(`finish_solved_run`), so the command ends about when the solve does.
"""

from __future__ import annotations

import contextlib
import time

import ray

from cluster.driver.revival import load_replay_states, warmed_up
from cluster.local.head_start import HeadStartResult

HANDOVER_TIMEOUT_S = 60.0  # an epoch of an MLP takes well under a second; this is for a stuck process
ENDED_POLL_S = 0.05  # how often the wait for the learner actor looks whether the head start has ended


def hand_over(run) -> HeadStartResult | None:
    """Wait until the run's learner actor is built or the head start has ended by itself, then take
    what `run.head_start` made; None (and a line saying why) when it made nothing. A result that
    solved the run is the run's end (`finish_solved_run`): nothing goes to the actors. Any other
    is loaded into the learner's replay, and the caller sends `learner_state` with its warm-up."""
    if run.actors is not None:
        built = run.actors.learner.__ray_ready__.remote()
        while not ray.wait([built], timeout=ENDED_POLL_S)[0] and not run.head_start.ended():
            pass
    result = _take(run)
    if result is not None and result.solved is None:
        load_replay_states(run.actors.learner, result.replay_states)
        run.progress.message(f"head start: {result.updates} updates on {result.env_steps} env steps while Ray and "
                             "the actors started; the learner goes on from them")
    return result


def solved_before_the_actors(run) -> bool:
    """True when the head start solved the run before its actors were asked for: its result is
    taken (once its export is made) and the run ends with it, no actor started. False, the run
    going on as usual, otherwise (also when that result turns out to be a failure)."""
    if run.actors is not None or run.head_start is None or not run.head_start.solved():
        return False
    if (result := hand_over(run)) is not None:
        take_head_start(run, result)
    return run.solved_by_head_start is not None


def hand_over_before_stopping(run) -> None:
    """Ctrl-C or SIGTERM came before the handover: the learner still takes the head start's training
    and warms up from it, so that the run's final checkpoint holds it (a second signal aborts, as
    everywhere). A head start that had solved the run (exporting its policy when the signal came,
    no actor asked for) still gives its result, the run's final files. Nothing to do when the
    handover was made, or no actor was asked for yet and the head start had not solved."""
    if run.head_start is None or (run.actors is None and not run.head_start.solved()):
        return
    with contextlib.suppress(ray.exceptions.RayError):  # a learner that died first: the run's end says so
        result = hand_over(run)
        if result is not None:
            state = take_head_start(run, result)
            if result.solved is None:
                warmed_up(run.actors.learner.warmup.remote(state), restoring=False)


def _take(run) -> HeadStartResult | None:
    result = run.head_start.hand_over(HANDOVER_TIMEOUT_S)
    run.head_start = None  # taken, whatever it made
    if result.error is not None:
        run.progress.message(f"the head start failed ({result.error}); training starts from the actors' own start")
        return None
    return result


def take_head_start(run, result: HeadStartResult) -> bytes:
    """Count what the head start did as the run's own: its env steps and epochs go on, its loss
    curve and evaluations go to TensorBoard, its solving evaluation (if any) solves the run, its
    first env step and update are the run's start-up moments (summary.json's `head_start` says how
    much of the run it was). Returns the learner state for the learner actor's warm-up. A result
    that solved the run becomes `run.solved_by_head_start`: its end (`finish_solved_run`)."""
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
        run.solved_by_head_start = result
        finished_at, env_steps, evaluation = result.solved
        if run.outcome.record_evaluation(evaluation, ray.put(result.weights), env_steps, finished_at):
            run.progress.message(
                f"solved in the head start: eval return {evaluation['mean']:.1f} >= {run.outcome.target:g} (weights "
                f"version {evaluation['version']}) after {run.outcome.time_to_solve_s:.1f}s and {env_steps} env steps")
    return result.learner_state


def finish_solved_run(run) -> None:
    """The end of a run its head start solved: the final checkpoint (the head start's learner state
    and, with checkpoint.replay, every shard's replay), policy.pt2 (the solving weights, exported by
    the head start), placement.json and summary.json, from what the head start made; no actor is
    waited for. The outputs' failures are the run's end's, as in finish_run."""
    result = run.solved_by_head_start
    _, _, evaluation = result.solved
    run.metrics.poll([], result.replay_stats)  # its shards' counts: summary.json's replay fields
    counters = {"epochs": run.epochs_done, "env_steps": run.metrics.env_steps, "wall_s": round(time.time() - run.clock_start, 3)}
    run.outputs.checkpoint(result.learner_state, run.epochs_done, counters,
                           result.replay_states if run.config.checkpoint.replay else None)
    run.outcome.policy = (evaluation["mean"], evaluation["version"])
    run.outputs.policy_bytes(result.policy)
    run.outputs.placement({"ray_address": ray.get_runtime_context().gcs_address, "solved_in_head_start": True,
                           "head_start_node": ray.get_runtime_context().get_node_id()})
