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
