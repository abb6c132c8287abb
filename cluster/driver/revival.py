"""Bringing state back: a dead learner inside the run, and the replay when a run resumes, from
the newest intact checkpoint set.

The learner is the one actor that holds training state, and the replay lives in its process. When
that process dies, Ray restarts the actor (cluster/driver/wiring.py: LEARNER_MAX_RESTARTS), which
builds an empty replay; the driver loads the newest checkpoint into it (weights, optimizer, scaler,
counters and, when the set has it, every shard's replay) and carries on. The collectors never
stopped, so env steps continue; the epochs trained since that checkpoint are lost, and so is the
replay when the set has none (it refills from the collectors). The new process's replay counts the
transitions its collectors sent that it does not hold (ReplayShard.lost_writes): summary.json's
`replay_lost_transitions`. At most one revival per `checkpoint.every_epochs` window: a learner
that dies again before reaching the next checkpoint ends the run (RunFailed) instead of looping.
"""

from __future__ import annotations

from cluster.driver.checkpoints import ResumePoint, load_latest, read_replay
from cluster.driver.run_errors import CheckpointRefused, error_line, original_error


def warmed_up(runtime, warmup_ref, restoring: bool) -> dict:
    """The learner's answer to `warmup`; CheckpointRefused when the checkpoint it was given to
    restore does not fit it (restore_learner_state's one-line ValueError)."""
    try:
        return runtime.get(warmup_ref)
    except (*runtime.errors.raised, ValueError) as err:
        cause = original_error(err)  # Ray's error for a ValueError is one too, its message Ray's header
        if restoring and isinstance(cause, ValueError):
            raise CheckpointRefused(str(cause).strip().splitlines()[0]) from None
        raise


class LearnerRevival:
    """Decides whether a dead learner may be revived, and revives it."""

    def __init__(self, checkpoint_dir, every_epochs: int):
        self.checkpoint_dir = checkpoint_dir
        self.every_epochs = every_epochs
        self.revived_at_epoch: int | None = None  # the checkpoint epoch the last revival started from

    def revive(self, run) -> bool:
        """Load the newest checkpoint into `run`'s restarted learner and rewind the run's epoch
        count to it; False when the learner died again within a checkpoint window of its last
        revival."""
        if self.revived_at_epoch is not None and run.epochs_done - self.revived_at_epoch < self.every_epochs:
            return False
        resume = load_latest(self.checkpoint_dir, run.progress.message)
        run.actors.learner_restarts += 1
        run.outputs.pending_checkpoint = None  # asked of the dead learner: never coming
        run.evaluations.forget_weights()
        run.outcome.forget_weights()
        start_epoch = resume.epochs if resume else 0
        learner = run.actors.learner  # the same handle: Ray restarts the actor behind it
        # A call made while Ray is still restarting it fails at once ("the actor is restarting"):
        # this one is retried until the new process takes it (or Ray gives the learner up for dead).
        warmup = learner.warmup.options(max_task_retries=-1)
        info = run.rt.get(warmup.remote(resume.learner_state if resume else None, run.metrics.learner_version))
        learner.count_lost_writes.remote()
        if resume is not None and resume.replay_files and self._replay_comes_back(run):
            what = restore_replay(run.rt, learner, run.config.collectors.num, resume)
        else:
            what = "its replay was lost with it and refills from the collectors (summary.json counts what was lost)"
            if run.config.checkpoint.replay and len(run.spec.obs_shape) != 1:
                what += " (pixel replay comes back only when a run resumes)"
        origin = f"the checkpoint of epoch {start_epoch}" if resume else "its initial weights (no checkpoint yet)"
        run.progress.message(
            f"the learner died; a new one continues from {origin}: the {run.epochs_done - start_epoch} epochs "
            f"trained since are lost, collectors kept going; {what}")
        run.epochs_done = start_epoch
        run.metrics.learner_version = info["version"]
        self.revived_at_epoch = start_epoch
        return True

    @staticmethod
    def _replay_comes_back(run) -> bool:
        # Frame-once storage is linked to its live collectors' frame streams, which went on while the
        # learner was down: a checkpointed pixel replay would be stitched to frames it never saw.
        return run.config.checkpoint.replay and len(run.spec.obs_shape) == 1


def restore_replay(runtime, learner, num_shards: int, resume: ResumePoint) -> str:
    """Load every shard's replay from a checkpoint set into the learner's replay; what came back,
    in one line."""
    if len(resume.replay_files) != num_shards:
        why = f"the checkpoint has {len(resume.replay_files)} shards, the run {num_shards} (collectors.num changed)"
        return f"replay not restored: {why}; it refills"
    states = [read_replay(path) for path in resume.replay_files]
    try:
        runtime.get([learner.set_replay_state.remote(i, state) for i, state in enumerate(states)])
    except (*runtime.errors.raised, ValueError) as err:
        return f"replay not restored ({error_line(err)}); it refills"
    inserted = sum(state["storage"]["total_added"] for state in states)
    return f"replay restored from the checkpoint of epoch {resume.epochs} ({inserted} transitions inserted by then)"
