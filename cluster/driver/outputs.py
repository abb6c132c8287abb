"""RunOutputs: what a run leaves in its directory, each file written atomically.

placement.json (which node runs what), checkpoints/ (the learner's state, the run's counters and
every shard's replay, the newest `checkpoint.keep` sets kept), policy.pt2 (the exported greedy
policy of a chosen weights version) and summary.json (the run's figures). TensorBoard events are written by TensorBoardLog.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from raypex.cluster.driver.checkpoints import (
    discard_parts,
    replay_file,
    save_checkpoint,
    set_manifest,
)
from raypex.cluster.driver.remote_run import RemoteRun
from raypex.cluster.driver.run_errors import original_error
from raypex.cluster.storage import OutputNotWritten, atomic_write, delete, join, reason


class PendingCheckpoint(NamedTuple):
    """A checkpoint asked of the learner and not written yet."""

    state: object  # ref to the learner's state bytes (LearnerActor.state_bytes)
    epoch: int
    counters: dict  # the run's counters at that epoch
    replay: list | None  # refs to each shard's replay file's manifest entry (LearnerActor.write_replay), or None
    replay_files: list[str]  # where each shard's file is written
    replacing: bool  # whether a whole set of the same epoch is there, which this one replaces once written
    asked_at: float  # time.perf_counter() when it was asked

    @property
    def refs(self) -> list:
        """Every answer the set waits for."""
        return [self.state, *(self.replay or [])]


class RunOutputs:
    """Writes a run directory's files."""

    def __init__(self, run_dir: Path, keep_checkpoints: int, runtime, say: Callable[[str], None] = lambda line: None,
                 remote: RemoteRun | None = None):
        """`remote`: the URI the run directory lives at, `run_dir` its local copy (remote_run.py)."""
        self.run_dir = run_dir
        self.remote = remote
        # where the learner writes its shards' replay (an absolute path: the learner's working
        # directory is Ray's), or the URI's checkpoints
        self.replay_dir = remote.replay_dir() if remote else str((run_dir / "checkpoints").absolute())
        self.rt = runtime  # where the learner runs (cluster/driver/runtime.py)
        self.keep_checkpoints = keep_checkpoints
        self.say = say  # one line for the progress display
        # The driver's loop never waits for a pending checkpoint: the learner serves it after
        # its queued epochs, and an epoch can wait a long time for data (a collector being
        # restarted), so the driver must keep polling and restarting collectors meanwhile.
        self.pending_checkpoint: PendingCheckpoint | None = None
        self.replay_pause_s_max = 0.0  # the longest the replay paused to copy one shard
        self.checkpoint_s_max = 0.0  # the longest from asking for a set to its manifest written
        self.unwritten: str | None = None  # the first final file the run's end could not write

    def request_checkpoint(self, learner, epoch: int, counters: dict, shards: int = 0) -> None:
        """Ask the learner for its state (LearnerActor.state_bytes) and, given a number of
        `shards`, to write each shard's replay into the checkpoint directory itself
        (LearnerActor.write_replay); `write_pending_checkpoint` completes the set once all has
        come. One at a time: a checkpoint due while one is pending is skipped, and the next one
        due catches up. A set of an epoch that has one already (the final set, env steps collected
        since) writes its replay under names of its own and replaces that one once whole."""
        if self.pending_checkpoint is None:
            replacing = self.checkpoint_env_steps(epoch) is not None
            files = [replay_file(self.replay_dir, epoch, i, counters["env_steps"] if replacing else None)
                     for i in range(shards)]
            replay = [self.rt.call(learner, "write_replay", i, file) for i, file in enumerate(files)] if shards \
                else None
            self.pending_checkpoint = PendingCheckpoint(self.rt.call(learner, "state_bytes"), epoch, counters, replay,
                                                        files, replacing, time.perf_counter())

    def unready_checkpoint_refs(self) -> list:
        """The pending checkpoint's answers not come yet (empty: none pending, or it can be written)."""
        if self.pending_checkpoint is None:
            return []
        refs = self.pending_checkpoint.refs
        ready = self.rt.wait(refs, num_returns=len(refs), timeout=0)
        return [ref for ref in refs if ref not in ready]

    def checkpoint_ready(self) -> bool:
        """Whether a checkpoint is pending and every answer it waits for has come."""
        return self.pending_checkpoint is not None and not self.unready_checkpoint_refs()

    def drop_pending_checkpoint(self) -> None:
        """Forget the pending checkpoint (asked of a learner that died) and remove what it wrote."""
        if self.pending_checkpoint is not None:
            pending = self.pending_checkpoint
            discard_parts(self.run_dir / "checkpoints", pending.epoch, pending.replay_files, pending.replacing)
            self.pending_checkpoint = None

    def write_pending_checkpoint(self) -> None:
        """Complete the pending checkpoint, if any (waits for its parts if not come yet): the
        learner's state and then the manifest, once every shard's file has landed. A learner that
        died or failed before writing its replay leaves a set without it (its state is lost with
        it, if it died: then no set)."""
        if self.pending_checkpoint is None:
            return
        pending, self.pending_checkpoint = self.pending_checkpoint, None
        state_ref, epoch, counters, replay_refs = pending.state, pending.epoch, pending.counters, pending.replay
        replay = None
        if replay_refs:
            try:
                replay = self.rt.get(replay_refs)
            except (*self.rt.errors.died, *self.rt.errors.raised) as err:
                # whole or gone
                discard_parts(self.run_dir / "checkpoints", epoch, pending.replay_files, pending.replacing)
                if isinstance(original_error(err), OutputNotWritten):  # a full disk, say: as if the driver wrote it
                    raise OutputNotWritten(f"checkpoint of epoch {epoch}: {original_error(err)}") from None
                if not isinstance(err, self.rt.errors.died):
                    raise
                self.say(f"the checkpoint of epoch {epoch} has no replay: the learner died while writing it")
            else:
                self.replay_pause_s_max = max([self.replay_pause_s_max] + [r.pop("pause_s") for r in replay])
        try:
            state = self.rt.get(state_ref)
        except (*self.rt.errors.died, *self.rt.errors.raised):  # the learner died: no set, nothing of it left
            discard_parts(self.run_dir / "checkpoints", epoch, pending.replay_files, pending.replacing)
            raise
        self.checkpoint(state, epoch, counters, replay)
        self.checkpoint_s_max = max(self.checkpoint_s_max, time.perf_counter() - pending.asked_at)

    def checkpoint_env_steps(self, epoch: int) -> int | None:
        """The env steps the whole set of `epoch` counted (None: no such set)."""
        manifest = set_manifest(self.run_dir / "checkpoints", epoch)
        return None if manifest is None else manifest["env_steps"]

    def placement(self, placement: dict) -> None:
        """placement.json: the Ray address, run id and every actor's node."""
        self._json("placement.json", placement)

    def checkpoint(self, state: bytes, epoch: int, counters: dict, replay: list[dict] | None = None) -> None:
        """A checkpoint set: the learner's state (LearnerActor.state_bytes), the run's counters
        and, when given, the manifest entries of every shard's replay file, written already. The
        replay files of a set it replaces (the same epoch's) are removed once its manifest is written."""
        directory = self.run_dir / "checkpoints"
        replaced = (set_manifest(directory, epoch) or {}).get("replay") or []
        save_checkpoint(directory, epoch, state, counters, self.keep_checkpoints, replay)
        for name in {part["file"] for part in replaced} - {part["file"] for part in replay or []}:
            delete(join(self.replay_dir, name))
        self.push()

    def push(self) -> None:
        """A run directory at a URI: upload what changed in its local copy (nothing to do for a local one)."""
        if self.remote is not None:
            try:
                self.remote.push()
            except OSError as err:
                raise OutputNotWritten(f"{self.remote.uri}: the run's files were not uploaded ({reason(err)})") from err

    def policy(self, learner, weights_ref) -> None:
        """policy.pt2: the greedy policy of published weights (`weights_ref`: a ref to Weights)."""
        self.policy_bytes(self.rt.get(self.rt.call(learner, "export_policy", weights_ref)))

    def policy_bytes(self, exported: bytes) -> None:
        """policy.pt2 from bytes exported already."""
        atomic_write(self.run_dir / "policy.pt2", exported)
        self.push()

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
        self.push()

    def _json(self, name: str, payload: dict) -> None:
        atomic_write(self.run_dir / name, json.dumps(payload, indent=2).encode())
