"""Checkpoint files in RUN_DIR/checkpoints: learner bytes plus the driver's counters.

A checkpoint is a pair `ckpt-EPOCH.pt` (the learner's torch.save bytes) and `ckpt-EPOCH.json`
(env steps, epochs, wall time so far, and the .pt file's size and SHA-256). Both are written to a
temporary name and renamed, the JSON last, so a crash mid-write never leaves a checkpoint that
looks complete but is not; a .pt damaged later (a full disk, a copy cut short) no longer matches
its JSON, and resuming falls back to the newest intact checkpoint, checked before Ray starts.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
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
    manifest = {**counters, "learner_bytes": len(learner_state),
                "learner_sha256": hashlib.sha256(learner_state).hexdigest()}
    atomic_write(directory / f"{stem}.json", json.dumps(manifest, indent=2).encode())
    for old in list_checkpoints(directory)[:-keep]:
        old.with_suffix(".pt").unlink(missing_ok=True)
        old.unlink(missing_ok=True)
    return directory / f"{stem}.pt"


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints (their .json files), oldest first."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("ckpt-*.json") if p.with_suffix(".pt").is_file())


def load_latest(directory: Path, on_skip: Callable[[str], None] = lambda line: None) -> ResumePoint | None:
    """The newest intact checkpoint, or None when there is none. Each newer one that is damaged
    (unreadable JSON, a .pt whose size or SHA-256 does not match it) is reported to `on_skip` in
    one line and passed over."""
    for manifest in reversed(list_checkpoints(directory)):
        problem = None
        try:
            counters = json.loads(manifest.read_text())
            state = manifest.with_suffix(".pt").read_bytes()
            point = ResumePoint(state, int(counters["env_steps"]), int(counters["epochs"]), float(counters["wall_s"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            problem = f"unreadable ({type(err).__name__})"
        else:
            if "learner_sha256" in counters and (len(state) != counters.get("learner_bytes")
                                                 or hashlib.sha256(state).hexdigest() != counters["learner_sha256"]):
                problem = "its .pt does not match the size and checksum its .json recorded"
        if problem is None:
            return point
        on_skip(f"checkpoint {manifest.stem} is damaged ({problem}); trying the one before it")
    return None
