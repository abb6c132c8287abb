"""How a run is stopped from outside: SIGINT (Ctrl-C) and SIGTERM take the same clean path.

SIGTERM is what `kill`, `timeout`, systemd, SLURM, Kubernetes and `ray job stop` send. Both
signals raise in the driver's main thread (SIGTERM as `Terminated`, a KeyboardInterrupt), so one
`except KeyboardInterrupt` serves both; the exit code says which (130 or 143, the shell's 128+N).

Only the first signal raises wherever it comes. A later one raises only inside `second_aborts()`,
where the run's end waits on its parts (the final checkpoint, the export): there it skips the rest
of the end. Anywhere else it is noted and let be, so the bookkeeping that leads from one signal
to summary.json is never cut by the next.
"""

from __future__ import annotations

import contextlib
import signal
import threading

EXIT_INTERRUPTED = 130  # SIGINT
EXIT_TERMINATED = 143  # SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; handled exactly as Ctrl-C, but exits 143."""


class StopAsked(KeyboardInterrupt):
    """A stop asked from inside the process (a Tune scheduler's, or a sweep's Ctrl-C reaching its
    trials: cluster/sweep/trial.py), raised in the driver's loop by an observer: the run ends as
    after a signal (nothing new starts), its summary's `ended` saying why."""

    def __init__(self, ended: str):
        super().__init__(ended)
        self.ended = ended


# The signals received, first first. Ray runs the handler of a signal that comes while the driver
# waits inside ray.get or ray.wait and raises a plain KeyboardInterrupt in place of what it raised,
# so the exception's type alone cannot say which signal stopped the run
# (tests/test_faults.py::test_a_sigterm_that_ray_turns_into_a_plain_keyboard_interrupt_still_exits_143).
_received: list[int] = []
_second_aborts = False  # inside second_aborts()
_deferring = False  # between hold() and release()
_held_from: int | None = None  # signals received when hold() was called


def _interrupt(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _raise_on_signal(signum, frame):
    first = not _received
    _received.append(signum)
    if not _deferring and (first or _second_aborts):
        raise _interrupt(signum)


def hold() -> None:
    """From now on a signal is noted, not raised, until `release` (a run being set up: the run
    directory is there, the run that would end with summary.json not yet)."""
    global _deferring, _held_from
    _deferring, _held_from = True, len(_received)


def release() -> None:
    """End `hold`: a first signal noted meanwhile is raised now (no-op without a hold)."""
    if stop_holding() == 0 and _received:
        raise _interrupt(_received[0])


def stop_holding() -> int | None:
    """End `hold` without raising (the code that held is failing anyway); the signals received
    when it began, None without a hold."""
    global _deferring, _held_from
    held_from, _deferring, _held_from = _held_from, False, None
    return held_from


@contextlib.contextmanager
def second_aborts():
    """While inside, a signal after the first raises too (the run's end: it stops waiting)."""
    global _second_aborts
    _second_aborts = True
    try:
        yield
    finally:
        _second_aborts = False


def _was_terminated(interrupt: KeyboardInterrupt) -> bool:
    return isinstance(interrupt, Terminated) or (bool(_received) and _received[0] == signal.SIGTERM)


def install_stop_signals() -> None:
    """Make SIGINT raise KeyboardInterrupt and SIGTERM raise Terminated in this (main) thread,
    forgetting the signals of an earlier run in this process.

    Called at start-up and again by `connect` (cluster/ray_runtime/wiring.py), which keeps Ray's
    start from putting its own SIGTERM handler in place of this one. SIGINT is set explicitly
    because a non-interactive shell starts background jobs (`raypex train ... &`) with it ignored.
    """
    _received.clear()
    reinstall_stop_signals()


def reinstall_stop_signals() -> None:
    """Put raypex's handlers back, keeping what was received: `ray.init` replaces the process's
    SIGTERM handler below Python's with its core worker's own (a stack dump, then abort: exit -6),
    while Python's `signal.getsignal` still names raypex's."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _raise_on_signal)
        signal.signal(signal.SIGTERM, _raise_on_signal)


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 143 for SIGTERM."""
    return EXIT_TERMINATED if _was_terminated(interrupt) else EXIT_INTERRUPTED


def signal_name(interrupt: KeyboardInterrupt) -> str:
    """'SIGTERM' or 'Ctrl-C', for messages."""
    return "SIGTERM" if _was_terminated(interrupt) else "Ctrl-C"
