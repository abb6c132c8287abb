"""Writing and reading a run's files: every file written whole or not at all, and nothing read
that could run code.

A file is written to a temporary name and renamed (OutputNotWritten, with nothing left behind,
when it cannot be written: a full disk, a lost mount). Replay files are arrays
(replay/state_file.py) written by the process that holds the shard, and read without pickle
(UnsafeRunFile for anything else). The driver (checkpoint sets, the run's other files) and the
learner's host (its shards' replay) both write through here.

A location is a local path or a URI of a pyarrow filesystem (`s3://bucket/run`, `gs://...`, with
pyarrow's query options such as `?endpoint_override=host:port&scheme=http` for an S3-compatible
server; credentials from the environment, as pyarrow reads them). An object store's upload is
whole or absent when it completes, so there a file is written in place.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

COPY_CHUNK = 1 << 22  # bytes moved at a time when a file is copied between locations


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


def is_uri(location: str | Path) -> bool:
    """Whether `location` names a pyarrow filesystem (`scheme://...`) rather than a local path."""
    return "://" in str(location)


def run_location(text: str) -> Path | str:
    """A run directory as given on the command line: a local path, or a URI kept as it is."""
    return text if is_uri(text) else Path(text)


def remote(uri: str):
    """(pyarrow filesystem, path in it) of `uri`; StorageUnavailable in one line when pyarrow or
    the filesystem cannot be had."""
    try:
        from pyarrow import fs
    except ImportError:
        raise StorageUnavailable(f"{uri}: a run directory at a URI needs pyarrow: pip install 'raypex[tune]' "
                                 "(or pip install pyarrow)") from None
    try:
        return fs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise StorageUnavailable(f"{uri}: not a filesystem pyarrow can open ({first})") from None


class StorageUnavailable(OSError):
    """A run directory's URI that cannot be opened; one line."""


def join(location: str, *names: str) -> str:
    """`location` (a path or a URI, its query kept at the end) with `names` appended."""
    if not is_uri(location):
        return str(Path(location, *names))
    base, _, query = location.partition("?")
    joined = "/".join([base.rstrip("/"), *names])
    return f"{joined}?{query}" if query else joined


def name_of(location: str) -> str:
    """The file name a location ends in."""
    return location.partition("?")[0].rstrip("/").rsplit("/", 1)[-1]


@contextlib.contextmanager
def open_input(location: str | Path) -> Iterator[IO[bytes]]:
    """A seekable binary handle on the file at `location` (a path or a URI); OSError when it
    cannot be read (FileNotFoundError when it is not there)."""
    if not is_uri(location):
        with open(location, "rb") as handle:
            yield handle
        return
    filesystem, path = remote(str(location))
    with filesystem.open_input_file(path) as handle:
        yield handle


def read_bytes(location: str | Path) -> bytes:
    """The whole file at `location`; OSError when it cannot be read."""
    with open_input(location) as handle:
        return handle.read()


def write_bytes(location: str | Path, data: bytes) -> None:
    """`data` as the file at `location`, whole or not at all; OutputNotWritten when it cannot be."""
    if not is_uri(location):
        path = Path(location)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OutputNotWritten(f"{path} was not written ({reason(err)})") from err
        atomic_write(path, data)
        return
    filesystem, path = remote(str(location))
    try:
        filesystem.create_dir(path.rsplit("/", 1)[0])
        with filesystem.open_output_stream(path) as out:
            out.write(data)
    except OSError as err:
        raise OutputNotWritten(f"{location} was not written ({reason(err)})") from err


def copy_file(source: str | Path, target: str | Path) -> None:
    """Copy a file between locations (paths or URIs), in chunks: a replay file can be gigabytes."""
    if is_uri(target):
        filesystem, path = remote(str(target))
        filesystem.create_dir(path.rsplit("/", 1)[0])
        with open_input(source) as handle, filesystem.open_output_stream(path) as out:
            while chunk := handle.read(COPY_CHUNK):
                out.write(chunk)
        return
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    with open_input(source) as handle, written(Path(target)) as out:
        while chunk := handle.read(COPY_CHUNK):
            out.write(chunk)


def modified(location: str | Path) -> float | None:
    """When the file at `location` was last written (seconds since the epoch), or None when no file
    is there."""
    if not is_uri(location):
        try:
            return Path(location).stat().st_mtime
        except OSError:
            return None
    from pyarrow import fs

    filesystem, path = remote(str(location))
    info = filesystem.get_file_info(path)
    if info.type != fs.FileType.File:
        return None
    return info.mtime.timestamp() if info.mtime is not None else 0.0


def list_files(location: str | Path) -> list[str]:
    """The relative paths ("trials/x/summary.json") of every file under `location`, sorted; empty
    when nothing is there."""
    if not is_uri(location):
        root = Path(location)
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
    from pyarrow import fs

    filesystem, root = remote(str(location))
    try:
        infos = filesystem.get_file_info(fs.FileSelector(root, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return []
    return sorted(i.path[len(root):].lstrip("/") for i in infos if i.type == fs.FileType.File)


def write_replay(location: str, state: dict) -> dict:
    """Write one shard's replay state to `location` (a path or a URI) whole or not at all, from the
    process that holds it (cluster/hosts/learner_host.py); its manifest entry (file, bytes, SHA-256)."""
    from raypex.replay.state_file import write_state  # numpy: not for the command line's start

    if is_uri(location):
        filesystem, path = remote(location)
        try:
            filesystem.create_dir(path.rsplit("/", 1)[0])
            with filesystem.open_output_stream(path) as out:
                size, sha256 = write_state(state, out)
        except OSError as err:
            with contextlib.suppress(OSError):
                filesystem.delete_file(path)
            raise OutputNotWritten(f"{location} was not written ({reason(err)})") from err
        return {"file": name_of(location), "bytes": size, "sha256": sha256}
    path = Path(location)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputNotWritten(f"{path} was not written ({reason(err)})") from err
    with written(path) as handle:
        size, sha256 = write_state(state, handle)
    return {"file": path.name, "bytes": size, "sha256": sha256}


def delete(location: str) -> None:
    """Remove the file at `location` (a path or a URI), if it is there."""
    if is_uri(location):
        filesystem, path = remote(location)
        with contextlib.suppress(FileNotFoundError, OSError):
            filesystem.delete_file(path)
    else:
        Path(location).unlink(missing_ok=True)


def read_replay(location: str | Path, part: dict | None = None) -> dict:
    """One shard's replay state from a checkpoint set (ReplayShard.set_state's input), from a path
    or a URI; UnsafeRunFile for a file that is not arrays. A URI's file is fetched to a temporary
    local file first, checked against its manifest entry `part` (size and SHA-256) on the way:
    the driver checks local files before anything starts, but never fetches replay."""
    import hashlib  # not for the command line's start

    from raypex.replay.state_file import NotAnArrayFile, check_state_file, read_state

    if not is_uri(location):
        try:
            return read_state(location, str(location))
        except NotAnArrayFile as err:
            raise UnsafeRunFile(str(err)) from None
    filesystem, path = remote(location)
    with tempfile.TemporaryFile() as local:
        digest, size = hashlib.sha256(), 0
        with filesystem.open_input_stream(path) as source:
            while chunk := source.read(1 << 22):
                local.write(chunk)
                digest.update(chunk)
                size += len(chunk)
        if part is not None and (size != part["bytes"] or digest.hexdigest() != part["sha256"]):
            raise UnsafeRunFile(f"{location} does not match the size and checksum its manifest recorded")
        try:
            local.seek(0)
            check_state_file(local, location)
            local.seek(0)
            return read_state(local, location)
        except NotAnArrayFile as err:
            raise UnsafeRunFile(str(err)) from None
