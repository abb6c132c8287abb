"""The errors that end a run or refuse one, each with a one-line message; here, without Ray, so
that `raypex train` can name them before it imports Ray (cluster/commands/train.py)."""

from __future__ import annotations

import functools
import re
import sysconfig
import traceback
from pathlib import Path

# A traceback's last line: the exception's (possibly dotted) type, a colon, its message.
_RAISED_LINE = re.compile(r"^(?:\w+\.)*(\w+(?:Error|Exception|Exit|Interrupt)): (.+)$")
# Ray's first line of a task's error: where it was raised ("ray::LearnerActor.warmup() (pid=...").
_RAISED_IN = re.compile(r"ray::(\w+)\.(\w+)\(\)")
# A frame of a traceback as text (what Ray keeps of a remote one), and the colours Ray puts in it.
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class PlacementError(Exception):
    """The cluster cannot hold the requested actors (one-line message)."""


class RunFailed(Exception):
    """The run cannot go on (a collector keeps dying, the learner died); one-line message.
    `details`: the traceback behind it, when there is one (written beside the run, shown with
    --debug); `resumable` False when continuing the run would meet the same error (an env that
    raises the same way every time)."""

    def __init__(self, message: str, details: str | None = None, resumable: bool = True):
        super().__init__(message)
        self.details = details  # the traceback behind the failure, or None
        self.resumable = resumable  # whether `raypex train --resume` can continue the run
        self.log: Path | None = None  # where the run wrote `details`


class CheckpointRefused(Exception):
    """The learner could not restore the checkpoint a resume gave it (networks of other shapes:
    saved by a raypex whose networks differ); one-line message. Nothing of the run is written."""


class StartRefused(Exception):
    """The runtime cannot start the run as configured (an address that does not answer, a cluster
    too small or with other software, a device it does not have); one-line message. The run
    directory goes back to how it was."""


def describe_failure(err: Exception, role_of, died: tuple = ()) -> str:
    """One line for an error that ends the run: which part died (`died`: the runtime's exception
    types for a dead part, whose `actor_id` `role_of` names), or the error itself (`error_line`),
    after the actor's class and method that raised it when Ray says so. A call on a live part that
    failed because another one died names the dead one."""
    for candidate in (err, getattr(err, "cause", None)):
        if died and isinstance(candidate, died):
            return f"{role_of(candidate.actor_id)} died"
    where = _RAISED_IN.search(str(err).strip().split("\n", 1)[0]) if original_error(err) is not err else None
    return f"{where[1]}.{where[2]} raised {cause_line(err)}" if where else cause_line(err)


def original_error(err: BaseException) -> BaseException:
    """The exception behind Ray's wrapping (a task's error keeps the one raised remotely as
    `cause`), or `err` itself."""
    cause = getattr(err, "cause", None)
    return original_error(cause) if isinstance(cause, BaseException) and cause is not err else err


def error_line(err: BaseException) -> str:
    """What went wrong, in one line: the original error's type and the first line of its message.
    Ray's own first line says only where the error was raised, and CUDA's last ones are advice."""
    err = original_error(err)
    lines = str(err).strip().splitlines()
    raised = [m for m in map(_RAISED_LINE.match, lines[1:]) if m]
    if raised:  # a traceback as text (Ray's, when it could not keep the cause)
        return ": ".join(raised[-1].groups())
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def raised_at(err: BaseException) -> str | None:
    """`file.py:LINE` of the innermost frame that raised `err` in code that is neither raypex's nor
    Python's nor an installed package's (a user's env, say); None when there is none."""
    frames = [(m[1], int(m[2])) for m in _FRAME.finditer(traceback_text(err))]  # this process's, or Ray's remote one
    for file, line in reversed(frames):
        if _users(file):
            return f"{Path(file).name}:{line}"
    return None


def traceback_text(err: BaseException) -> str:
    """The traceback of `err` as text: the remote one Ray's error carries in its text, else this
    process's."""
    original = original_error(err)
    if original.__traceback__ is None and original is not err:  # unpickled from another process
        return _ANSI.sub("", str(err)).strip() + "\n"
    return "".join(traceback.format_exception(type(original), original, original.__traceback__))


def cause_line(err: BaseException) -> str:
    """`error_line`, with where the user's code raised it when it did: "RuntimeError: it broke
    (grid.py:18)"."""
    where = raised_at(err)
    return f"{error_line(err)} ({where})" if where else error_line(err)


def _users(file: str) -> bool:
    if file.startswith("<"):
        return False  # <frozen ...>, <string>
    path = Path(file).resolve()
    return not any(root == path or root in path.parents for root in _not_users_roots())


@functools.cache
def _not_users_roots() -> tuple[Path, ...]:
    """raypex's own folders, Python's standard library and the installed packages."""
    import raypex

    ours = [Path(raypex.__file__).resolve().parent]
    ours += [Path(entry).resolve() / room for entry in raypex.__path__ for room in ("actors", "learner", "replay", "cluster")]
    paths = sysconfig.get_paths()
    return tuple(ours + [Path(paths[key]).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")])
