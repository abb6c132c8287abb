"""Bringing state back: a dead learner inside the run, and the replay when a run resumes, from
the newest intact checkpoint set.

The learner is the one actor that holds training state, and the replay lives in its process. When
that process dies, Ray restarts the actor (cluster/ray_runtime/wiring.py: LEARNER_MAX_RESTARTS), which
builds an empty replay; the driver loads the newest checkpoint into it (weights, optimizer, scaler,
counters and, when the set has it, every shard's replay) and carries on. The collectors never
stopped, so env steps continue; the epochs trained since that checkpoint are lost, and so is the
replay when the set has none (it refills from the collectors). The new process's replay counts the
transitions its collectors sent that it does not hold (ReplayShard.lost_writes): summary.json's
`replay_lost_transitions`. At most one revival per `checkpoint.every_epochs` window: a learner
that dies again before reaching the next checkpoint ends the run (RunFailed) instead of looping.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from raypex.cluster.driver.checkpoints import ResumePoint, load_latest
from raypex.cluster.driver.run_errors import CheckpointRefused, error_line, original_error


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


class Revived(NamedTuple):
    """Where a revived learner continues from."""

    epochs: int  # the epoch of the checkpoint it loaded (0: none, its initial weights)
    version: int  # the weights version it publishes next from


class LearnerRevival:
    """Decides whether a dead learner may be revived, and revives it: the newest checkpoint set
    loaded into the process Ray restarted behind the same handle, and its replay when it can."""

    def __init__(self, runtime, checkpoint_dir: Path, every_epochs: int, num_shards: int,
                 checkpoint_replay: bool, pixels: bool, say: Callable[[str], None], replay_dir: str | None = None):
        """`replay_dir`: where the replay files are when not beside the manifests (a URI)."""
        self.rt = runtime
        self.checkpoint_dir = checkpoint_dir
        self.every_epochs = every_epochs
        self.num_shards = num_shards
        self.checkpoint_replay = checkpoint_replay  # checkpoint sets hold every shard's replay
        # Frame-once pixel storage is linked to its live collectors' frame streams, which went on
        # while the learner was down: a checkpointed one would be stitched to frames it never saw.
        self.pixels = pixels
        self.say = say
        self.replay_dir = replay_dir
        self.revived_at_epoch: int | None = None  # the checkpoint epoch the last revival started from
        self.count = 0  # revivals so far

    def allowed(self, epochs_done: int) -> bool:
        """False when the learner died again within a checkpoint window of its last revival."""
        return self.revived_at_epoch is None or epochs_done - self.revived_at_epoch >= self.every_epochs

    def revive(self, learner, epochs_done: int, version: int) -> Revived:
        """Load the newest checkpoint into the restarted `learner` (the same handle: Ray restarts
        the actor behind it), and say what was lost. `version`: the newest the run has seen, which
        the new process publishes on from."""
        resume = load_latest(self.checkpoint_dir, self.say, self.replay_dir)
        self.count += 1
        start_epoch = resume.epochs if resume else 0
        # A call made while Ray is still restarting it fails at once ("the actor is restarting"):
        # this one is retried until the new process takes it (or Ray gives the learner up for dead).
        info = self.rt.get(self.rt.call(learner, "warmup", resume.learner_state if resume else None, version,
                                        retried=True))
        self.rt.call(learner, "count_lost_writes")
        if resume is not None and resume.replay_files and self.checkpoint_replay and not self.pixels:
            what = restore_replay(self.rt, learner, self.num_shards, resume).line
        else:
            what = "its replay was lost with it and refills from the collectors (summary.json counts what was lost)"
            if self.checkpoint_replay and self.pixels:
                what += " (pixel replay comes back only when a run resumes)"
        origin = f"the checkpoint of epoch {start_epoch}" if resume else "its initial weights (no checkpoint yet)"
        self.say(f"the learner died; a new one continues from {origin}: the {epochs_done - start_epoch} epochs "
                 f"trained since are lost, collectors kept going; {what}")
        self.revived_at_epoch = start_epoch
        return Revived(start_epoch, info["version"])


class RestoredReplay(NamedTuple):
    """What `restore_replay` brought back."""

    line: str  # said to the user
    digests: list[str]  # each shard's digest as the learner holds it now (replay/digest.py); empty: none restored


def restore_replay(runtime, learner, num_shards: int, resume: ResumePoint) -> RestoredReplay:
    """Have the learner load every shard's replay from a checkpoint set's files, read where it runs."""
    if len(resume.replay_files) != num_shards:
        why = f"the checkpoint has {len(resume.replay_files)} shards, the run {num_shards} (collectors.num or collectors.max changed)"
        return RestoredReplay(f"replay not restored: {why}; it refills", [])
    try:
        loaded = runtime.get([runtime.call(learner, "load_replay", i, location, part)
                              for i, (location, part) in enumerate(zip(resume.replay_files, resume.replay_parts))])
    except (*runtime.errors.raised, ValueError) as err:
        return RestoredReplay(f"replay not restored ({error_line(err)}); it refills", [])
    inserted = sum(shard["inserted"] for shard in loaded)
    return RestoredReplay(f"replay restored from the checkpoint of epoch {resume.epochs} ({inserted} transitions "
                          "inserted by then)", [shard["digest"] for shard in loaded])
