"""RunOutputs: what a run leaves in its directory, each file written atomically.

placement.json (which node runs what), checkpoints/ (the learner's state, the run's counters and
every shard's replay, the newest `checkpoint.keep` sets kept), policy.pt2 (the exported greedy
policy of a chosen weights version) and summary.json (the run's figures). TensorBoard events are written by TensorBoardLog.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from raypex.cluster.driver.checkpoints import OutputNotWritten, atomic_write, save_checkpoint


class PendingCheckpoint(NamedTuple):
    """A checkpoint asked of the learner and not written yet."""

    state: object  # ref to the learner's state bytes (LearnerActor.state_bytes)
    epoch: int
    counters: dict  # the run's counters at that epoch
    replay: list | None  # refs to each shard's replay state, or None: no replay in this set


class RunOutputs:
    """Writes a run directory's files."""

    def __init__(self, run_dir: Path, keep_checkpoints: int, runtime, say: Callable[[str], None] = lambda line: None):
        self.run_dir = run_dir
        self.rt = runtime  # where the learner runs (cluster/driver/runtime.py)
        self.keep_checkpoints = keep_checkpoints
        self.say = say  # one line for the progress display
        # The driver's loop never waits for a pending checkpoint: the learner serves it after
        # its queued epochs, and an epoch can wait a long time for data (a collector being
        # restarted), so the driver must keep polling and restarting collectors meanwhile.
        self.pending_checkpoint: PendingCheckpoint | None = None
        self.replay_pause_s_max = 0.0  # the longest the replay paused to hand over one shard
        self.unwritten: str | None = None  # the first final file the run's end could not write

    def request_checkpoint(self, learner, epoch: int, counters: dict, shards: int = 0) -> None:
        """Ask the learner for its state (LearnerActor.state_bytes) and, given a number of
        `shards`, for each shard's replay; `write_pending_checkpoint` writes the set once it has
        come. One at a time: a checkpoint due while one is pending is skipped, and the next one
        due catches up."""
        if self.pending_checkpoint is None:
            replay = [learner.replay_state.remote(i) for i in range(shards)] if shards else None
            self.pending_checkpoint = PendingCheckpoint(learner.state_bytes.remote(), epoch, counters, replay)

    def write_pending_checkpoint(self) -> None:
        """Write the pending checkpoint, if any (waits for its parts if not come yet). A learner
        that died before handing over its replay leaves no set (its state is lost with it)."""
        if self.pending_checkpoint is None:
            return
        state_ref, epoch, counters, replay_refs = self.pending_checkpoint
        self.pending_checkpoint = None
        replay = None
        if replay_refs:
            try:
                replay = self.rt.get(replay_refs)
            except self.rt.errors.died:
                self.say(f"the checkpoint of epoch {epoch} has no replay: the learner died while saving")
            else:
                self.replay_pause_s_max = max([self.replay_pause_s_max] + [r.pop("pause_s") for r in replay])
        self.checkpoint(self.rt.get(state_ref), epoch, counters, replay)

    def placement(self, placement: dict) -> None:
        """placement.json: the Ray address, run id and every actor's node."""
        self._json("placement.json", placement)

    def checkpoint(self, state: bytes, epoch: int, counters: dict, replay: list[dict] | None = None) -> None:
        """A checkpoint set: the learner's state (LearnerActor.state_bytes), the run's counters
        and, when given, every shard's replay state."""
        save_checkpoint(self.run_dir / "checkpoints", epoch, state, counters, self.keep_checkpoints, replay)

    def policy(self, learner, weights_ref) -> None:
        """policy.pt2: the greedy policy of published weights (`weights_ref`: a ref to Weights)."""
        self.policy_bytes(self.rt.get(learner.export_policy.remote(weights_ref)))

    def policy_bytes(self, exported: bytes) -> None:
        """policy.pt2 from bytes exported already."""
        atomic_write(self.run_dir / "policy.pt2", exported)

    def error_log(self, text: str) -> Path | None:
        """error.log: the traceback behind a failed run (None when it cannot be written)."""
        try:
            atomic_write(self.run_dir / "error.log", text.encode())
        except OutputNotWritten:
            return None
        return self.run_dir / "error.log"

    def summary(self, summary: dict) -> None:
        """summary.json."""
        self._json("summary.json", summary)

    def _json(self, name: str, payload: dict) -> None:
        atomic_write(self.run_dir / name, json.dumps(payload, indent=2).encode())
