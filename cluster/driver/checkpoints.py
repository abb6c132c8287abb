"""Checkpoint sets in RUN_DIR/checkpoints: the learner's bytes, every shard's replay, counters.

A checkpoint of epoch E is `ckpt-E.pt` (the learner's torch.save bytes), with
`checkpoint.replay: true` one `ckpt-E-shard-I.replay` per shard (its storage, pickled), and
`ckpt-E.json`: the manifest (env steps, epochs, wall time so far, and each file's size and
SHA-256). Every file is written to a temporary name and renamed, the manifest last, so a crash
mid-write never leaves a set that looks complete; a part damaged or missing later (a full disk, a
copy cut short) no longer matches its manifest, and resuming falls back to the newest intact set,
checked before Ray starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ResumePoint:
    """What a resumed run continues from: the learner's bytes, the driver's counters and, when
    the set has them, the files of every shard's replay (read when needed: they can be large)."""

    learner_state: bytes
    env_steps: int
    epochs: int
    wall_s: float
    replay_files: list[Path] = field(default_factory=list)


class OutputNotWritten(OSError):
    """A run-directory file could not be written (a full disk, a lost mount, no permission):
    nothing half-written was left behind, and the message says what and why in one line."""


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file and a rename (never a half-written file);
    a write that fails removes its temporary file and raises OutputNotWritten."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OutputNotWritten(f"{path} was not written ({_reason(err)})") from err


def _reason(err: OSError) -> str:
    """Why a write failed, as the system says it ("No space left on device"), also when
    atomic_write has already wrapped the error."""
    inner = err.__cause__ if isinstance(err, OutputNotWritten) and err.__cause__ is not None else err
    return getattr(inner, "strerror", None) or str(inner)


def _part(path: Path, data: bytes) -> dict:
    atomic_write(path, data)
    return {"file": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def save_checkpoint(directory: Path, epoch: int, learner_state: bytes, counters: dict, keep: int,
                    replay_states: list[dict] | None = None) -> Path:
    """Write one checkpoint set and delete all but the newest `keep`; returns the .pt path."""
    stem = f"ckpt-{epoch:08d}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        learner = _part(directory / f"{stem}.pt", learner_state)
        manifest = {**counters, "learner_bytes": learner["bytes"], "learner_sha256": learner["sha256"]}
        if replay_states is not None:
            manifest["replay"] = [_part(directory / f"{stem}-shard-{i}.replay", pickle.dumps(state, protocol=5))
                                  for i, state in enumerate(replay_states)]
        atomic_write(directory / f"{stem}.json", json.dumps(manifest, indent=2).encode())
    except OSError as err:  # the parts already written would only take space: a set is whole or gone
        for part in [directory / f"{stem}.pt", *directory.glob(f"{stem}-shard-*.replay")]:
            part.unlink(missing_ok=True)
        newest = list_checkpoints(directory)
        raise OutputNotWritten(f"checkpoint {stem} could not be written in {directory} ({_reason(err)}); "
                               f"the newest whole one is {newest[-1].stem if newest else 'none'}") from err
    for old in list_checkpoints(directory)[:-keep]:
        for replay in directory.glob(f"{old.stem}-shard-*.replay"):
            replay.unlink(missing_ok=True)
        old.with_suffix(".pt").unlink(missing_ok=True)
        old.unlink(missing_ok=True)
    return directory / f"{stem}.pt"


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint sets (their manifests, with a .pt beside), oldest first."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("ckpt-*.json") if p.with_suffix(".pt").is_file())


def read_replay(path: Path) -> dict:
    """One shard's replay state from a checkpoint set (ReplayShard.set_state's input)."""
    return pickle.loads(path.read_bytes())


def _matches(path: Path, part: dict) -> bool:
    data = path.read_bytes()
    return len(data) == part["bytes"] and hashlib.sha256(data).hexdigest() == part["sha256"]


def load_latest(directory: Path, on_skip: Callable[[str], None] = lambda line: None) -> ResumePoint | None:
    """The newest intact checkpoint set, or None when there is none. Each newer one that is
    damaged (an unreadable manifest, a file missing or not matching its size and SHA-256) is
    reported to `on_skip` in one line and passed over."""
    for manifest in reversed(list_checkpoints(directory)):
        problem = None
        try:
            counters = json.loads(manifest.read_text())
            state = manifest.with_suffix(".pt").read_bytes()
            point = ResumePoint(state, int(counters["env_steps"]), int(counters["epochs"]), float(counters["wall_s"]))
            if "learner_sha256" in counters and (len(state) != counters.get("learner_bytes")
                                                 or hashlib.sha256(state).hexdigest() != counters["learner_sha256"]):
                problem = "its .pt does not match the size and checksum its .json recorded"
            for part in counters.get("replay", []):
                if problem is None and not _matches(directory / part["file"], part):
                    problem = f"{part['file']} does not match the size and checksum its .json recorded"
                point.replay_files.append(directory / part["file"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            problem = problem or f"unreadable or incomplete ({type(err).__name__})"
        if problem is None:
            return point
        on_skip(f"checkpoint {manifest.stem} is damaged ({problem}); trying the one before it")
    return None
