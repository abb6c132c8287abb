"""HangWatch: a `--local` run's guard against an env step that never returns.

With Ray, a collector is its own process and the driver sees its step hang (cluster/driver/
supervisor.py). Here the collectors step in the driver's own thread, so nothing else would ever
run: a watcher thread reads how long the current env step of each collector and of the
evaluator has been running and,
past `env.step_timeout_s`, interrupts the main thread with a signal whose handler raises
EnvWentBad there, so the run ends as for any env fault: one line, its summary, exit 1.

Only a signal breaks into a step waiting in a system call (a sleep, a socket, a lock), so a signal
it is; but not one a user or a tool sends (SIGUSR1 and SIGUSR2 are theirs: faulthandler, Tune's
own stop, a job's "dump your state"). The watcher takes a real-time signal that nothing in the
process handles, and gives it back when the run ends. A step inside a C call that keeps Python's
lock runs on until it returns, as any Python code would. Only the main thread takes signals, so a
run started from another thread (`raypex.train(..., block=False)`) is not watched.
"""

from __future__ import annotations

import signal
import threading
import time

from raypex.actors.step_check import EnvWentBad

CHECK_EVERY_S = 0.5


class HangWatch:
    """Watches the `step_started` of each part that steps an env (actors/env_stepper.py,
    actors/evaluator.py) from a thread of its own; `parts`: (name for the line, part)."""

    def __init__(self, parts: list[tuple[str, object]], timeout_s: float, env_id: str):
        self.parts, self.timeout_s, self.env_id = parts, timeout_s, env_id
        self.fault: str | None = None
        self.stopped = threading.Event()
        self.signum: int | None = None  # the real-time signal taken while watching
        self.previous = None  # its handler before

    def start(self) -> None:
        """Watch, when this is the main thread (the only one a signal can interrupt) and a
        real-time signal is free."""
        if threading.current_thread() is not threading.main_thread():
            return
        self.signum = free_realtime_signal()
        if self.signum is None:
            return
        self.previous = signal.signal(self.signum, self._raise)
        self.main = threading.main_thread().ident
        threading.Thread(target=self._watch, name="raypex-hang-watch", daemon=True).start()

    def stop(self) -> None:
        """Stop watching and give the signal its handler back."""
        self.stopped.set()
        if self.previous is not None:
            signal.signal(self.signum, self.previous)
            self.previous = None

    def _watch(self) -> None:
        while not self.stopped.wait(CHECK_EVERY_S):
            for name, part in self.parts:
                started = part.step_started  # read once: the stepping thread clears it
                if started is not None and time.perf_counter() - started > self.timeout_s:
                    self.fault = (f"{name}: a step of env.id {self.env_id} has not returned for "
                                  f"{time.perf_counter() - started:.0f}s (env.step_timeout_s: {self.timeout_s:g}); "
                                  "the env hangs")
                    signal.pthread_kill(self.main, self.signum)
                    return

    def _raise(self, signum, frame) -> None:
        if self.fault is not None and not self.stopped.is_set():
            raise EnvWentBad(self.fault)


def free_realtime_signal() -> int | None:
    """The first real-time signal with its default disposition (no handler of anyone's), or None
    where there is none (a platform without them)."""
    if not hasattr(signal, "SIGRTMIN"):
        return None
    return next((n for n in range(signal.SIGRTMIN, signal.SIGRTMAX + 1) if signal.getsignal(n) == signal.SIG_DFL),
                None)
