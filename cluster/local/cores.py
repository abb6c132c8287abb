"""A core of its own for the head start while Ray's local cluster starts.

Ray's start and the run's actors (a dozen Python processes, two of them importing torch) take
every core of a laptop for their first seconds, and the head start trained beside them at about
half the speed it trains alone. So while it trains, its process is pinned to one core and the
driver to the others: every process Ray starts is a child of the driver, born with the driver's
CPU affinity, so Ray and the actors stay off the head start's core. When the head start ends,
every thread of the driver and of its descendants gets the driver's original CPUs back: from the
head start itself when it stops training (solved: its export and Ray's start share every core),
and from the driver when it takes the head start's result.

An affinity, unlike a lower priority (nice), can be given back without privileges, so nothing of
the run stays held back after its first seconds (BENCHMARKS.md, "The head start gets a core").
Linux only, as the head start is; with one CPU there is nothing to split.
"""

from __future__ import annotations

import os

PASSES = 3  # a process Ray starts while the CPUs are given back may have copied a narrow affinity


class CoreSplit:
    """The head start's core and the driver's original CPUs, and the calls that split and rejoin them."""

    def __init__(self) -> None:
        self.cpus = frozenset(os.sched_getaffinity(0))
        self.core = max(self.cpus) if len(self.cpus) > 1 else None  # None: one CPU, no split
        self._rejoined = False

    def pin_this_process(self) -> None:
        """In the head start's process: run on its core alone."""
        if self.core is not None:
            os.sched_setaffinity(0, {self.core})

    def keep_driver_off(self) -> None:
        """In the driver, before Ray starts: the other CPUs, for it and every process it starts."""
        if self.core is not None:
            os.sched_setaffinity(0, self.cpus - {self.core})

    def rejoin(self, root_pid: int | None = None) -> int:
        """Give the driver's original CPUs back to every thread of `root_pid` (default: this
        process, the driver) and its descendants: Ray's processes, the actors, the head start.
        Returns how many threads were changed; a second call from the same process does nothing."""
        if self.core is None or self._rejoined:
            return 0
        self._rejoined = True
        import psutil  # a Ray dependency

        changed = 0
        for _ in range(PASSES):
            narrow = [tid for tid in _threads(psutil, root_pid) if _affinity(tid) not in (None, self.cpus)]
            for tid in narrow:
                try:
                    os.sched_setaffinity(tid, self.cpus)
                    changed += 1
                except OSError:  # the thread ended meanwhile
                    pass
            if not narrow:
                break
        return changed


def _threads(psutil, root_pid: int | None) -> list[int]:
    """Every thread id of the process `root_pid` and its descendants, as far as they can still be read."""
    root = psutil.Process(root_pid)
    tids = []
    for process in [root, *root.children(recursive=True)]:
        try:
            tids.extend(thread.id for thread in process.threads())
        except psutil.Error:  # ended meanwhile
            pass
    return tids


def _affinity(tid: int) -> frozenset | None:
    try:
        return frozenset(os.sched_getaffinity(tid))
    except OSError:
        return None
