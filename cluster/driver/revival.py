"""Bringing state back: a dead learner inside the run, a restarted shard's replay, and every
shard's replay when a run resumes, from the newest intact checkpoint set.

The learner is the one actor that holds training state; when its process dies, the driver starts
a new learner actor connected to the same shards and collectors (RunActors.respawn_learner),
loads the newest checkpoint (weights, optimizer, scaler, counters) and carries on: the collectors
and shards never stopped, so env steps and replay continue, and only the epochs trained since
that checkpoint are lost. At most one revival per `checkpoint.every_epochs` window: a learner
that dies again before reaching the next checkpoint ends the run (RunFailed) instead of looping.
"""

from __future__ import annotations

import ray

from cluster.driver.checkpoints import ResumePoint, load_latest, read_replay


class LearnerRevival:
    """Decides whether a dead learner may be revived, and revives it."""

    def __init__(self, checkpoint_dir, every_epochs: int):
        self.checkpoint_dir = checkpoint_dir
        self.every_epochs = every_epochs
        self.revived_at_epoch: int | None = None  # the checkpoint epoch the last revival started from

    def revive(self, run) -> bool:
        """Replace `run`'s dead learner and rewind the run's epoch count to its newest checkpoint;
        False when the learner died again within a checkpoint window of its last revival."""
        if self.revived_at_epoch is not None and run.epochs_done - self.revived_at_epoch < self.every_epochs:
            return False
        resume = load_latest(self.checkpoint_dir, run.progress.message)
        learner = run.actors.respawn_learner()
        run.supervisor.learner = learner
        run.outputs.pending_checkpoint = None  # asked of the dead learner: never coming
        run.evaluations.forget_weights()
        run.outcome.forget_weights()
        start_epoch = resume.epochs if resume else 0
        info = ray.get(learner.warmup.remote(resume.learner_state if resume else None, run.metrics.learner_version))
        origin = f"the checkpoint of epoch {start_epoch}" if resume else "its initial weights (no checkpoint yet)"
        run.progress.message(
            f"the learner died; a new one continues from {origin}: the {run.epochs_done - start_epoch} epochs "
            "trained since are lost, collectors and replay kept going")
        run.epochs_done = start_epoch
        run.metrics.learner_version = info["version"]
        self.revived_at_epoch = start_epoch
        return True


def restore_replay(shards: list, resume: ResumePoint) -> str:
    """Load every shard's replay from a resumed checkpoint set; says what came back."""
    if len(resume.replay_files) != len(shards):
        return (f"replay not restored: the checkpoint has {len(resume.replay_files)} shards, the run "
                f"{len(shards)} (collectors.num changed); it refills")
    states = [read_replay(path) for path in resume.replay_files]
    try:
        ray.get([shard.set_state.remote(state) for shard, state in zip(shards, states)])
    except ray.exceptions.RayTaskError as err:
        return f"replay not restored ({str(err).strip().splitlines()[-1]}); it refills"
    inserted = sum(state["storage"]["total_added"] for state in states)
    return f"replay restored from the checkpoint of epoch {resume.epochs} ({inserted} transitions inserted by then)"


def restore_shard_replay(run, shard: int) -> str:
    """Load one restarted shard's replay from the newest intact checkpoint set; says what came
    back (the chunks it took since that checkpoint are lost)."""
    if not run.config.checkpoint.replay:
        return "it starts empty (checkpoint.replay is off)"
    if len(run.spec.obs_shape) != 1:  # frame-once storage is linked to its live collector's frame stream
        return "it starts empty (pixel replay comes back only when a run resumes)"
    resume = load_latest(run.revival.checkpoint_dir, run.progress.message, with_replay=True)
    if resume is None or len(resume.replay_files) != len(run.actors.shards):
        return "it starts empty (no checkpoint with replay yet)"
    state = read_replay(resume.replay_files[shard])
    ray.get(run.actors.shards[shard].set_state.remote(state))
    return f"its replay comes back from the checkpoint of epoch {resume.epochs} ({state['storage']['total_added']} " \
           "transitions inserted by then)"
