"""Checks on a run directory before anything starts, so a refused command changes nothing.

A new run needs a directory it can create and write; a resume needs a run directory whose config
the overrides do not reshape, whose run is not finished (unless the overrides extend it), and an
intact checkpoint. All of this is decided before Ray starts, and before config.yaml is rewritten.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from raypex.cluster.config.arguments import UsageError
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.driver.checkpoints import ResumePoint, load_latest
from raypex.cluster.driver.outcome import PolicyFile
from raypex.cluster.driver.remote_run import RemoteRun
from raypex.cluster.storage import UnsafeRunFile

# Keys that fix the networks' shapes or what the env produces: a checkpoint cannot be loaded
# into anything else, so a resume may not change them.
SHAPE_KEYS = ("env.id", "env.kwargs", "env.frame_stack", "network.hidden", "network.dueling",
              "network.critic_norm", "network.critic_head", "network.critic_bins", "network.critic_range",
              "network.encoder", "network.encoder_kwargs")


def open_remote(uri: str, option: str, resume: bool) -> RemoteRun:
    """The run directory at `uri`, its local copy made (and, to resume, filled with its files but
    the replay); UsageError in one line when it cannot be opened, when a new run finds files
    there, or a resume finds none."""
    try:
        remote = RemoteRun(uri)
        holds = remote.holds_files()
        if resume and not holds:
            raise UsageError(f"{option} {uri}: no run there")
        if not resume and holds:
            raise UsageError(f"{option} {uri} already holds files; choose a new location or use --resume {uri}")
        if resume:
            remote.pull()
    except OSError as err:  # StorageUnavailable, or the store's own refusal
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UsageError(f"{option} {uri}: {first}") from None
    return remote


def check_writable(run_dir: Path, option: str) -> None:
    """UsageError unless `run_dir` is (or can be created as) a directory this process can write.

    The test is a real one (a temporary directory made and removed where the run directory is or
    would be), so it holds for root and read-only file systems alike.
    """
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"{option} {run_dir}: a file is in the way; give a directory path")
    existing = run_dir
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option} {run_dir}: {existing} is a file, so no directory can be made under it")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".raypex-write-check-", dir=existing))
    except OSError as err:
        raise UsageError(f"{option} {run_dir}: cannot create a directory in {existing} ({err.strerror})") from None


def _value(config: RunConfig, dotted: str):
    node = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def check_resume(run_dir: Path, saved: RunConfig, resumed: RunConfig,
                 warn: Callable[[str], None], remote: RemoteRun | None = None) -> ResumePoint:
    """The checkpoint to resume `run_dir` from with config `resumed` (the saved one plus
    overrides); UsageError, with the run directory untouched, when it cannot be resumed so.
    `remote`: the URI the run lives at, `run_dir` its local copy."""
    where = f"--resume {remote.uri if remote else run_dir}"
    for key in SHAPE_KEYS:
        before, after = _value(saved, key), _value(resumed, key)
        if before != after:
            raise UsageError(f"{where}: {key} cannot change on resume (the run has {before!r}, the override "
                             f"gives {after!r}); its checkpoints hold networks of the run's shape")
    _refuse_finished(run_dir, saved, resumed, where)
    try:
        resume = load_latest(run_dir / "checkpoints", warn, remote.replay_dir() if remote else None)
    except UnsafeRunFile as err:
        raise UsageError(f"{where}: {err}") from None
    if resume is None:
        raise UsageError(f"{where}: no intact checkpoint in {run_dir / 'checkpoints'}")
    check_writable(run_dir, "--resume")
    return resume


def _refuse_finished(run_dir: Path, saved: RunConfig, resumed: RunConfig, where: str) -> None:
    """A finished run is resumed only with overrides that let it train on; otherwise its
    results (policy.pt2, summary.json, checkpoints) would be overwritten by one more epoch."""
    summary = _last_summary(run_dir)
    try:
        env_steps = int(summary["env_steps"])
    except (KeyError, TypeError, ValueError):
        return  # no summary (killed, say): nothing finished to protect
    ended = summary.get("ended")
    if ended is None:  # written before runs said how they ended
        solved = summary.get("time_to_solve_s") is not None
        ended = "solved" if solved else "env_steps" if env_steps >= saved.stop.env_steps else None
    if ended == "solved":
        best = summary.get("final_eval_return")
        target = resumed.stop.eval_return
        if target is not None and (best is None or target <= best):
            raise UsageError(f"{where}: the run is finished (solved, eval return {best}); to train on, give "
                             "stop.eval_return=null (or a higher target) and, to train longer, a larger "
                             "stop.env_steps")
    if ended == "env_steps" and resumed.stop.env_steps <= env_steps:
        raise UsageError(f"{where}: the run is finished ({env_steps} env steps, stop.env_steps="
                         f"{saved.stop.env_steps}); to train on, give a larger one, e.g. "
                         f"stop.env_steps={2 * saved.stop.env_steps}")
    wall_s = summary.get("wall_s")
    if ended == "wall_s" and resumed.stop.wall_s is not None and isinstance(wall_s, (int, float)) \
            and resumed.stop.wall_s <= wall_s:
        raise UsageError(f"{where}: the run is finished ({wall_s:.0f} s of training, "
                         f"stop.wall_s={saved.stop.wall_s:g}); to train on, give a larger one, e.g. "
                         f"stop.wall_s={wall_s + saved.stop.wall_s:.0f} for as long again, or stop.wall_s=null")


def kept_policy(run_dir: Path) -> PolicyFile | None:
    """What the policy.pt2 a resumed run finds in its directory holds, from the last summary.json
    (older summaries: its final eval return); None when there is none."""
    summary = _last_summary(run_dir)
    if summary is None or not (run_dir / "policy.pt2").is_file():
        return None
    score = summary.get("policy_eval_return", summary.get("final_eval_return"))
    return PolicyFile(float(score) if isinstance(score, (int, float)) else None, summary.get("policy_version"))


def _last_summary(run_dir: Path) -> dict | None:
    """The run directory's summary.json, or None when there is none or it is not a JSON object."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None
