"""Writing and reading a run's files: every file written whole or not at all, and nothing read
that could run code.

A file is written to a temporary name and renamed (OutputNotWritten, with nothing left behind,
when it cannot be written: a full disk, a lost mount). Replay files are arrays
(replay/state_file.py) written by the process that holds the shard, and read without pickle
(UnsafeRunFile for anything else). The driver (checkpoint sets, the run's other files) and the
learner's host (its shards' replay) both write through here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from raypex.replay.state_file import NotAnArrayFile, read_state, write_state


class UnsafeRunFile(ValueError):
    """A run-directory file that holds more than data (something that would run code if loaded)
    or replay in raypex's old pickled form: refused in one line naming the file."""


class OutputNotWritten(OSError):
    """A run-directory file could not be written (a full disk, a lost mount, no permission):
    nothing half-written was left behind, and the message says what and why in one line."""


@contextlib.contextmanager
def written(path: Path) -> Iterator[IO[bytes]]:
    """A binary handle whose contents become `path` whole, once the block ends, via a temporary
    file and a rename; a write that fails removes its temporary file and raises OutputNotWritten."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OutputNotWritten(f"{path} was not written ({reason(err)})") from err


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all (`written`)."""
    with written(path) as handle:
        handle.write(data)


def reason(err: OSError) -> str:
    """Why a write failed, as the system says it ("No space left on device"), also when
    atomic_write has already wrapped the error."""
    inner = err.__cause__ if isinstance(err, OutputNotWritten) and err.__cause__ is not None else err
    return getattr(inner, "strerror", None) or str(inner)


def write_replay(path: Path, state: dict) -> dict:
    """Write one shard's replay state to `path` whole or not at all, from the process that holds it
    (cluster/hosts/learner_host.py); returns its manifest entry (file, bytes, SHA-256)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputNotWritten(f"{path} was not written ({reason(err)})") from err
    with written(path) as handle:
        size, sha256 = write_state(state, handle)
    return {"file": path.name, "bytes": size, "sha256": sha256}


def read_replay(path: Path) -> dict:
    """One shard's replay state from a checkpoint set (ReplayShard.set_state's input); UnsafeRunFile
    for a file that is not arrays."""
    try:
        return read_state(path, str(path))
    except NotAnArrayFile as err:
        raise UnsafeRunFile(str(err)) from None
