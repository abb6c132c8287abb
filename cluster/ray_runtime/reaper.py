"""A watchdog for a local Ray cluster that raypex started: when the driver's process ends without
shutting Ray down (kill -9, the OOM killer), it ends every process of that cluster.

Ray's GCS, raylet and workers go with the driver, but its dashboard and runtime-env agents were
seen logging "Raylet is dead! Exiting" and then staying alive, orphaned (Ray 2.60). The watchdog
is a small process started before Ray. It holds the read end of a pipe whose only write end is
the driver's: when the driver's process ends, for any reason, the read returns. Every process of
the cluster inherits a token in its environment; the watchdog notes those processes and their
descendants while the driver lives and, after a short grace for a normal shutdown, kills those
still running.

Run as `python -m raypex.cluster.ray_runtime.reaper TOKEN` with the pipe as stdin (start_reaper does that);
it writes READY to its stdout once it runs (confirm_reaper reads it).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

TOKEN_VARIABLE = "RAYPEX_CLUSTER_TOKEN"
GRACE_S = 2.0  # what a crashed driver's cluster gets to exit by itself
SCAN_S = 2.0  # how often the watchdog notes the cluster's processes
READY = b"ready\n"  # what the watchdog writes once it runs
CONFIRM_S = 10.0  # how long confirm_reaper waits for READY (it comes in well under a second)
_write_ends: list[int] = []  # kept open for the life of the driver's process
_starting: list[subprocess.Popen] = []  # started, not confirmed yet


def start_reaper() -> None:
    """Start the watchdog for the Ray cluster this process is about to start; every process
    started after this call (Ray's included) carries the token it looks for. It is started by this
    module's own name, so an installed raypex finds it from any working directory;
    `confirm_reaper` says whether it came up."""
    token = uuid.uuid4().hex
    read_end, write_end = os.pipe()  # not inherited by later children: only this process writes
    _starting.append(subprocess.Popen(
        [sys.executable, "-m", __name__, token], stdin=read_end, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != TOKEN_VARIABLE}))
    os.close(read_end)
    _write_ends.append(write_end)
    os.environ[TOKEN_VARIABLE] = token


def confirm_reaper() -> str | None:
    """None once the watchdog `start_reaper` started has said it runs, else one line saying that
    it did not start and why (its own last line). Called after Ray's start, which takes longer
    than the watchdog's, so it rarely waits."""
    if not _starting:
        return None
    process = _starting.pop()
    output = b""
    deadline = time.monotonic() + CONFIRM_S
    while not output.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(process.stdout.fileno(), 4096) if ready else b""
        if ready and not chunk:
            break  # it ended
        output += chunk
    process.stdout.close()  # it writes nothing more
    if output.startswith(READY):
        return None
    lines = output.decode(errors="replace").strip().splitlines()
    why = lines[-1] if lines else f"no word from it within {CONFIRM_S:g}s"
    return (f"the watchdog did not start ({why}): if this driver is killed, its Ray cluster's "
            "processes may be left running (`ray stop` ends them)")


def _process_table() -> dict[int, tuple[int, int, bytes]]:
    """pid -> (parent pid, start time in clock ticks, raw environment) of every live process this
    one may read, itself excluded (a zombie has exited: it is left out). The environment is read
    from /proc as raw bytes: Ray renames its processes (setproctitle), after which psutil's parsed
    `environ()` came back empty for them."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        if fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), int(fields[19]), environ)
    return table


def cluster_processes(variable: str) -> dict[int, int]:
    """pid -> start time of the processes whose environment holds `variable` and of all their
    descendants. Descendants count because a process may overwrite its environment's memory with
    its title: Ray's dashboard and runtime-env agents (children of the raylet) were seen with the
    variable no longer readable, and then orphaned, alive after their cluster was gone."""
    table = _process_table()
    wanted = variable.encode()
    found = {pid for pid, (_, _, environ) in table.items() if wanted in environ}
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    frontier = list(found)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return {pid: table[pid][1] for pid in found}


def still_running(processes: dict[int, int]) -> list[int]:
    """The pids of `processes` (pid -> start time) that are still the same processes."""
    table = _process_table()
    return [pid for pid, started in processes.items() if pid in table and table[pid][1] == started]


def cluster_variable(token: str) -> str:
    """The "NAME=value" every process of the cluster with this token carries."""
    return f"{TOKEN_VARIABLE}={token}"


def reap(processes: dict[int, int]) -> int:
    """Kill `processes` (pid -> start time) that are still running; returns how many."""
    killed = 0
    for pid in still_running(processes):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except OSError:
            continue  # gone meanwhile
    return killed


def main(token: str) -> None:
    """Note the cluster's processes every SCAN_S while the driver's process lives (an orphaned
    agent can no longer be found once its parent is gone); once it has ended, reap them all."""
    variable = cluster_variable(token)
    known: dict[int, int] = {}
    os.write(sys.stdout.fileno(), READY)
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], SCAN_S)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break  # b"": the driver's process has ended
        known.update(cluster_processes(variable))
    time.sleep(GRACE_S)
    reap({**known, **cluster_processes(variable)})


if __name__ == "__main__":
    main(sys.argv[1])
