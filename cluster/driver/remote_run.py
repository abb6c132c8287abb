"""A run directory at a URI (`s3://bucket/run`, any pyarrow filesystem), as Ray Train's storage
path is: the run's files land there, written by the process that holds their data.

The driver's files (config.yaml, checkpoints' learner state and manifests, TensorBoard events,
policy.pt2, summary.json, videos) are small: the driver writes them to a local copy of the run
directory, as for a local run, and `push` uploads what changed, after every checkpoint set and at
the run's end (a manifest only after the files it lists). Each shard's replay is written to the
URI by the learner itself and never reaches the copy, nor the driver. A resume `pull`s everything
but the replay into a fresh copy; the learner fetches its replay from the URI. The copy lasts as
long as the command (`close`): everything in it has been uploaded by then.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from raypex.cluster.driver.checkpoints import SET_FILE
from raypex.cluster.storage import delete, join, list_files, remote

REPLAY_FILE = re.compile(r"ckpt-\d+-shard-\d+(-at-\d+)?\.npz")


class RemoteRun:
    """The URI `uri` and the local copy the driver works on."""

    def __init__(self, uri: str, copy: Path | None = None):
        self.uri = uri
        self.filesystem, self.root = remote(uri)  # StorageUnavailable when it cannot be opened
        self.copy = copy or Path(tempfile.mkdtemp(prefix="raypex-run-"))
        self._pushed: dict[str, tuple[int, int]] = {}  # relative path -> (size, mtime_ns) uploaded

    def close(self) -> None:
        """Remove the local copy (after the last push, or when nothing more will be read from it)."""
        shutil.rmtree(self.copy, ignore_errors=True)

    def replay_dir(self) -> str:
        """Where the learner writes and reads its shards' replay files."""
        return join(self.uri, "checkpoints")

    def holds_files(self) -> bool:
        """Whether anything is at the URI already."""
        return bool(list_files(self.uri))

    def pull(self) -> None:
        """Copy every file but the replay from the URI into the local copy."""
        for relative in list_files(self.uri):
            if REPLAY_FILE.fullmatch(relative.rsplit("/", 1)[-1]):
                continue
            target = self.copy / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with self.filesystem.open_input_stream(f"{self.root}/{relative}") as source:
                target.write_bytes(source.read())
            stat = target.stat()
            self._pushed[relative] = (stat.st_size, stat.st_mtime_ns)

    def push(self) -> None:
        """Upload every file of the local copy that changed since the last push, manifests last, and
        remove at the URI the checkpoint sets the copy no longer holds (older than its oldest)."""
        changed = []
        for path in sorted(self.copy.rglob("*")):
            if not path.is_file() or path.name.endswith(".tmp"):
                continue
            relative = path.relative_to(self.copy).as_posix()
            stat = path.stat()
            if self._pushed.get(relative) != (stat.st_size, stat.st_mtime_ns):
                changed.append((relative, path, (stat.st_size, stat.st_mtime_ns)))
        changed.sort(key=lambda item: item[0].startswith("checkpoints/") and item[0].endswith(".json"))
        for relative, path, seen in changed:
            parent = f"{self.root}/{relative}".rsplit("/", 1)[0]
            self.filesystem.create_dir(parent)
            with self.filesystem.open_output_stream(f"{self.root}/{relative}") as out:
                out.write(path.read_bytes())
            self._pushed[relative] = seen
        kept = [int(m[1]) for p in (self.copy / "checkpoints").glob("ckpt-*.json") if (m := SET_FILE.match(p.name))]
        if not kept:
            return
        for relative in list_files(self.uri):
            name = relative.rsplit("/", 1)[-1]
            if relative.startswith("checkpoints/") and (m := SET_FILE.match(name)) and int(m[1]) < min(kept):
                self.filesystem.delete_file(f"{self.root}/{relative}")
                self._pushed.pop(relative, None)

    def forget(self, relative: str) -> None:
        """Remove the file `relative` at the URI (the copy has dropped it: a PBT exploit's stale files)."""
        delete(join(self.uri, relative))
        self._pushed.pop(relative, None)

    def forget_checkpoints(self) -> None:
        """Remove every checkpoint file at the URI, replay included (a PBT exploit replaces the
        trial's sets with its donor's)."""
        for relative in list_files(join(self.uri, "checkpoints")):
            self.forget(f"checkpoints/{relative}")
