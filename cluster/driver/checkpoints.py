"""Checkpoint sets in RUN_DIR/checkpoints: the learner's bytes, every shard's replay, counters.

A checkpoint of epoch E is `ckpt-E.pt` (the learner's state: tensors and plain containers, read
weights-only), with `checkpoint.replay: true` one `ckpt-E-shard-I.npz` per shard (its state as
arrays: replay/state_file.py), and `ckpt-E.json`: the manifest (env steps, epochs, wall time so
far, and each file's size and SHA-256). Each shard's file is written by the process that holds the
shard (the learner, `write_replay`), never passed through the driver; the driver writes the
learner's file and then the manifest, once every part has landed. Every file is written to a
temporary name and renamed, the manifest last, so a crash mid-write never leaves a set that looks
complete; a part damaged or missing later (a full disk, a copy cut short) no longer matches its
manifest, and resuming falls back to the newest intact set, checked before Ray starts.

Nothing in a run directory is unpickled: a set whose files hold anything but tensors, arrays and
JSON (a pickle planted by whoever could edit the files, hashes and all) is refused in one line
(UnsafeRunFile). Replay pickled by raypex before it wrote arrays is converted to arrays when
the set is resumed, read by an unpickler that builds numpy arrays and nothing else
(replay/state_file.py), and the manifest rewritten to name the new files; a pickle importing
anything else is refused in one line.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from raypex.cluster.storage import (
    OutputNotWritten,
    UnsafeRunFile,
    atomic_write,
    copy_file,
    delete,
    is_uri,
    join,
    list_files,
    open_input,
    read_bytes,
    reason,
    write_replay,
)
from raypex.replay.state_file import NotAnArrayFile, check_state_file, read_pickled_state

SET_FILE = re.compile(r"ckpt-(\d+)[-.]")  # any file of the set of that epoch
REPLAY_SUFFIX = ".npz"
PICKLED_REPLAY_SUFFIX = ".replay"  # what raypex wrote before replay files held arrays
HASH_CHUNK = 1 << 22  # bytes read at a time to check a file's SHA-256

@dataclass
class ResumePoint:
    """What a resumed run continues from: the learner's bytes, the driver's counters and, when
    the set has them, the files of every shard's replay (read when needed: they can be large)."""

    learner_state: bytes
    env_steps: int
    epochs: int
    wall_s: float
    eval_return: float | None = None  # the newest evaluation's mean by then (a Tune trial reports it)
    replay_files: list[str] = field(default_factory=list)  # where each shard's file is: a path, or a URI
    replay_parts: list[dict] = field(default_factory=list)  # their manifest entries (size, SHA-256)


def _part(path: Path, data: bytes) -> dict:
    atomic_write(path, data)
    return {"file": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def checkpoint_stem(epoch: int) -> str:
    """The name every file of epoch `epoch`'s set starts with."""
    return f"ckpt-{epoch:08d}"


def replay_file(directory: Path | str, epoch: int, shard: int, env_steps: int | None = None) -> str:
    """Where shard `shard`'s replay of epoch `epoch`'s set is written (`directory`: a path or a URI).
    `env_steps` names the files of a set that replaces a whole one of the same epoch (a run that
    stops with env steps collected since its last epoch's set), so that they never overwrite the
    files of the set they replace until their own manifest is written."""
    replacing = f"-at-{env_steps}" if env_steps is not None else ""
    return join(str(directory), f"{checkpoint_stem(epoch)}-shard-{shard}{replacing}{REPLAY_SUFFIX}")


def _set_parts(directory: Path, stem: str) -> list[Path]:
    """The files of set `stem` other than its manifest."""
    return [directory / f"{stem}.pt", *directory.glob(f"{stem}-shard-*{REPLAY_SUFFIX}"),
            *directory.glob(f"{stem}-shard-*{PICKLED_REPLAY_SUFFIX}")]


def discard_parts(directory: Path, epoch: int, replay_files: list[str] = (), replacing: bool = False) -> None:
    """Remove what a set that will not be completed has written (its manifest never was): its
    `replay_files` (paths or URIs) and, unless it was `replacing` a whole set of the same epoch
    (whose files stay), every other file of its name in `directory`."""
    for location in replay_files:
        delete(location)
    if not replacing:
        for part in _set_parts(directory, checkpoint_stem(epoch)):
            part.unlink(missing_ok=True)


def set_manifest(directory: Path, epoch: int) -> dict | None:
    """The manifest of the whole set of epoch `epoch` in `directory` (None: no such set; a set's
    manifest is written last)."""
    manifest = directory / f"{checkpoint_stem(epoch)}.json"
    return json.loads(manifest.read_text()) if manifest.is_file() else None


def save_checkpoint(directory: Path, epoch: int, learner_state: bytes, counters: dict, keep: int,
                    replay_parts: list[dict] | None = None) -> Path:
    """Write one checkpoint set and delete all but the newest `keep`; returns the .pt path.
    `replay_parts`: the manifest entries of every shard's replay file (`write_replay`), already
    in `directory`. A set that replaces a whole one of the same epoch writes the learner's file
    over that one's (the same epochs: the same state) and then its own manifest."""
    stem = checkpoint_stem(epoch)
    replacing = (directory / f"{stem}.json").is_file()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        learner = _part(directory / f"{stem}.pt", learner_state)
        manifest = {**counters, "learner_bytes": learner["bytes"], "learner_sha256": learner["sha256"]}
        if replay_parts is not None:
            manifest["replay"] = replay_parts
        atomic_write(directory / f"{stem}.json", json.dumps(manifest, indent=2).encode())
    except OSError as err:  # the parts already written would only take space: a set is whole or gone
        discard_parts(directory, epoch, [str(directory / part["file"]) for part in replay_parts or []], replacing)
        newest = list_checkpoints(directory)
        raise OutputNotWritten(f"checkpoint {stem} could not be written in {directory} ({reason(err)}); "
                               f"the newest whole one is {newest[-1].stem if newest else 'none'}") from err
    _remove_older_sets(directory, keep)
    return directory / f"{stem}.pt"


def _remove_older_sets(directory: Path, keep: int) -> None:
    """Remove every file of an epoch older than the newest `keep` whole sets: their manifests
    first, so that a set stopped half-removed (a signal) never looks whole, and whatever an
    earlier removal or write left behind goes with them."""
    oldest_kept = int(SET_FILE.match(list_checkpoints(directory)[-keep:][0].name)[1])
    older = [p for p in directory.iterdir() if (m := SET_FILE.match(p.name)) and int(m[1]) < oldest_kept]
    for path in sorted(older, key=lambda path: path.suffix != ".json"):
        path.unlink(missing_ok=True)


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint sets (their manifests, with a .pt beside), oldest first."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("ckpt-*.json") if p.with_suffix(".pt").is_file())


def _matches(path: Path, part: dict) -> bool:
    """Whether `path` has the size and SHA-256 its manifest entry `part` recorded (read in chunks:
    a replay file can be larger than the driver should hold)."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size == part["bytes"] and digest.hexdigest() == part["sha256"]


def _check_learner_state(data: bytes, name: str) -> None:
    """UnsafeRunFile unless learner-state bytes load weights-only."""
    from raypex.learner.learner_state import UnsafeLearnerState, read_learner_state

    try:
        read_learner_state(data, name=name)
    except UnsafeLearnerState as err:
        raise UnsafeRunFile(str(err)) from None


def _check_replay_file(source, name: str) -> None:
    """UnsafeRunFile unless a replay file (a path, or a seekable handle) is arrays (headers read,
    not their data)."""
    try:
        check_state_file(source, name)
    except NotAnArrayFile as err:
        raise UnsafeRunFile(str(err)) from None


def _read_pickled_replay(path: Path | str) -> dict:
    """The state in an old pickled replay file; UnsafeRunFile for one that holds anything else."""
    try:
        return read_pickled_state(read_bytes(path), str(path))
    except NotAnArrayFile as err:
        raise UnsafeRunFile(str(err)) from None


def convert_pickled_replay(manifest: Path) -> list[dict]:
    """Rewrite set `manifest`'s pickled replay files as array files, then its manifest to name
    them, then delete the pickles (the set stays whole at every step: the manifest names the old
    files until the new ones have landed); the new replay entries. UnsafeRunFile for a pickle that
    holds anything but a replay state's arrays (nothing in it is run)."""
    counters = json.loads(manifest.read_text())
    parts, pickled = [], []
    for part in counters["replay"]:
        path = manifest.parent / part["file"]
        if path.suffix == PICKLED_REPLAY_SUFFIX:
            parts.append(write_replay(str(path.with_suffix(REPLAY_SUFFIX)), _read_pickled_replay(path)))
            pickled.append(path)
        else:
            parts.append(part)
    atomic_write(manifest, json.dumps({**counters, "replay": parts}, indent=2).encode())
    for path in pickled:
        path.unlink(missing_ok=True)
    return parts


def check_safe(point: ResumePoint, manifest: Path) -> None:
    """UnsafeRunFile unless every file of the set holds only data: the learner's state loads
    weights-only and each replay file is arrays (their headers read, not their data)."""
    _check_learner_state(point.learner_state, str(manifest.with_suffix(".pt")))
    for path in point.replay_files:
        if not is_uri(path):  # one at a URI the learner checks as it fetches it (storage.read_replay)
            _check_replay_file(path, str(path))


def check_run_files(root: Path | str) -> None:
    """UnsafeRunFile, naming the first file, unless every checkpoint file and policy.pt2 under `root`
    (a sweep's experiment directory, a path or a URI: trials' run directories and Tune's copies of
    their sets) holds only data: manifests are JSON, learner states load weights-only, replay files
    are arrays (headers read), policies hold nothing torch would unpickle. Checked before anything
    loads them."""
    for relative in list_files(root):
        location = join(str(root), relative)
        name = relative.rsplit("/", 1)[-1]
        suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
        checkpoint_file = name.startswith("ckpt-")
        if checkpoint_file and suffix == PICKLED_REPLAY_SUFFIX:
            _read_pickled_replay(location)
        elif checkpoint_file and suffix == ".json":
            try:
                json.loads(read_bytes(location))
            except ValueError:
                raise UnsafeRunFile(f"{location} is not JSON, which a checkpoint's manifest is") from None
        elif checkpoint_file and suffix == ".pt":
            _check_learner_state(read_bytes(location), location)
        elif checkpoint_file and suffix == REPLAY_SUFFIX:
            with open_input(location) as handle:
                _check_replay_file(handle, location)
        elif name == "policy.pt2":
            _check_policy(location)


def _check_policy(location: str) -> None:
    """UnsafeRunFile unless the policy.pt2 at `location` holds nothing torch would unpickle (one at
    a URI is fetched to a temporary file to be read)."""
    from raypex.learner.policy_file import PolicyFileError, check_no_code

    with tempfile.TemporaryDirectory(prefix="raypex-check-") as local:
        path = Path(location)
        if is_uri(location):
            path = Path(local) / "policy.pt2"
            copy_file(location, path)
        try:
            check_no_code(path)
        except PolicyFileError as err:
            raise UnsafeRunFile(str(err).replace(str(path), location, 1)) from None


def load_latest(directory: Path, on_skip: Callable[[str], None] = lambda line: None,
                replay_dir: str | None = None) -> ResumePoint | None:
    """The newest intact checkpoint set, or None when there is none. Each newer one that is
    damaged (an unreadable manifest, a file missing or not matching its size and SHA-256) is
    reported to `on_skip` in one line and passed over. An intact set holding more than data is not
    passed over: UnsafeRunFile (check_safe). Replay in the old pickled form is converted to
    arrays (`convert_pickled_replay`), and `on_skip` told so. `replay_dir`: where the replay files are when not in `directory`
    (a run directory at a URI: cluster/driver/remote_run.py); the learner checks those as it
    fetches them."""
    for manifest in reversed(list_checkpoints(directory)):
        problem = None
        try:
            counters = json.loads(manifest.read_text())
            state = manifest.with_suffix(".pt").read_bytes()
            point = ResumePoint(state, int(counters["env_steps"]), int(counters["epochs"]), float(counters["wall_s"]),
                                counters.get("eval_return"))
            if "learner_sha256" in counters and (len(state) != counters.get("learner_bytes")
                                                 or hashlib.sha256(state).hexdigest() != counters["learner_sha256"]):
                problem = "its .pt does not match the size and checksum its .json recorded"
            for part in counters.get("replay", []):
                if replay_dir is not None:
                    point.replay_files.append(join(replay_dir, part["file"]))
                    point.replay_parts.append(part)
                    continue
                if problem is None and not _matches(directory / part["file"], part):
                    problem = f"{part['file']} does not match the size and checksum its .json recorded"
                point.replay_files.append(str((directory / part["file"]).absolute()))  # for the learner, elsewhere
                point.replay_parts.append(part)
        except (OSError, ValueError, KeyError, TypeError) as err:
            problem = problem or f"unreadable or incomplete ({type(err).__name__})"
        if problem is None:
            if any(path.endswith(PICKLED_REPLAY_SUFFIX) for path in point.replay_files):
                point.replay_parts = convert_pickled_replay(manifest)
                point.replay_files = [str((directory / part["file"]).absolute()) for part in point.replay_parts]
                on_skip(f"checkpoint {manifest.stem}'s replay was pickled by an older raypex: converted to arrays "
                        f"({', '.join(part['file'] for part in point.replay_parts)}), reading nothing but arrays "
                        "from the pickle")
            check_safe(point, manifest)
            return point
        on_skip(f"checkpoint {manifest.stem} is damaged ({problem}); trying the one before it")
    return None
