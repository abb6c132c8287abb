"""RunOutputs: what a run leaves in its directory, each file written atomically.

placement.json (which node runs what), checkpoints/ (the learner's state and the run's counters,
the newest `checkpoint.keep` kept), policy.pt2 (the exported greedy policy of a chosen weights
version) and summary.json (the run's figures). TensorBoard events are written by TensorBoardLog.
"""

from __future__ import annotations

import json
from pathlib import Path

import ray

from cluster.driver.checkpoints import atomic_write, save_checkpoint


class RunOutputs:
    """Writes a run directory's files."""

    def __init__(self, run_dir: Path, keep_checkpoints: int):
        self.run_dir = run_dir
        self.keep_checkpoints = keep_checkpoints
        # A checkpoint asked of the learner and not written yet: (state ref, epoch, counters). The
        # driver's loop never waits for it: the learner serves it after its queued epochs, and an
        # epoch can wait a long time for data (a collector being restarted), so the driver must
        # keep polling and restarting collectors meanwhile.
        self.pending_checkpoint: tuple | None = None

    def request_checkpoint(self, learner, epoch: int, counters: dict) -> None:
        """Ask the learner for its state (LearnerActor.state_bytes); `write_pending_checkpoint`
        writes it once it has come. One at a time: a checkpoint due while one is pending is
        skipped, and the next one due catches up."""
        if self.pending_checkpoint is None:
            self.pending_checkpoint = (learner.state_bytes.remote(), epoch, counters)

    def write_pending_checkpoint(self) -> None:
        """Write the pending checkpoint, if any (waits for the learner's state if not come yet)."""
        if self.pending_checkpoint is not None:
            state_ref, epoch, counters = self.pending_checkpoint
            self.pending_checkpoint = None
            self.checkpoint(ray.get(state_ref), epoch, counters)

    def placement(self, placement: dict) -> None:
        """placement.json: the Ray address, run id and every actor's node."""
        self._json("placement.json", placement)

    def checkpoint(self, state: bytes, epoch: int, counters: dict) -> None:
        """A checkpoint of the learner's state (LearnerActor.state_bytes) with the run's counters."""
        save_checkpoint(self.run_dir / "checkpoints", epoch, state, counters, self.keep_checkpoints)

    def policy(self, learner, weights_ref) -> None:
        """policy.pt2: the greedy policy of the published weights `weights_ref`."""
        atomic_write(self.run_dir / "policy.pt2", ray.get(learner.export_policy.remote(weights_ref)))

    def summary(self, summary: dict) -> None:
        """summary.json."""
        self._json("summary.json", summary)

    def _json(self, name: str, payload: dict) -> None:
        atomic_write(self.run_dir / name, json.dumps(payload, indent=2).encode())
