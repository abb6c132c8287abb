"""When this process started, on the wall clock: the zero of `raypex train`'s time to solve, and
of each actor's share of the start-up (summary.json's `startup_s`). No Ray, no torch."""

from __future__ import annotations

import os
import time


def process_start_time() -> float:
    """When this process started, as a `time.time()` value (time_to_solve_s counts from it).

    On Linux it is read from /proc: the process's start in clock ticks since boot against the
    seconds since boot in /proc/uptime, exact to a tick (10 ms). psutil's `create_time` adds the
    boot time instead, which the kernel reports in whole seconds, so it lands up to a second early
    and every run would count that second as start-up.
    """
    try:
        with open("/proc/self/stat") as stat:
            # Fields after the parenthesised command name; starttime is field 22 of the line.
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            since_boot = float(uptime.read().split()[0])
        return time.time() - (since_boot - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil  # a Ray dependency
    except ImportError:
        return time.time()
    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return time.time()
