"""Checkpoint files in RUN_DIR/checkpoints: learner bytes plus the driver's counters.

A checkpoint is a pair `ckpt-EPOCH.pt` (the learner's torch.save bytes) and `ckpt-EPOCH.json`
(env steps, epochs, wall time so far). Both are written to a temporary name and renamed, the JSON
last, so a crash mid-write never leaves a checkpoint that looks complete but is not.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ResumePoint:
    """What a resumed run continues from: the learner's bytes and the driver's counters."""

    learner_state: bytes
    env_steps: int
    epochs: int
    wall_s: float


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file and a rename (never a half-written file)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def save_checkpoint(directory: Path, epoch: int, learner_state: bytes, counters: dict, keep: int) -> Path:
    """Write one checkpoint and delete all but the newest `keep`; returns the .pt path."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"ckpt-{epoch:08d}"
    atomic_write(directory / f"{stem}.pt", learner_state)
    atomic_write(directory / f"{stem}.json", json.dumps(counters, indent=2).encode())
    for old in list_checkpoints(directory)[:-keep]:
        old.with_suffix(".pt").unlink(missing_ok=True)
        old.unlink(missing_ok=True)
    return directory / f"{stem}.pt"


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints (their .json files), oldest first."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("ckpt-*.json") if p.with_suffix(".pt").is_file())


def load_latest(directory: Path) -> ResumePoint | None:
    """The newest complete checkpoint, or None when there is none."""
    found = list_checkpoints(directory)
    if not found:
        return None
    latest = found[-1]
    counters = json.loads(latest.read_text())
    return ResumePoint(latest.with_suffix(".pt").read_bytes(), counters["env_steps"], counters["epochs"],
                       counters["wall_s"])
