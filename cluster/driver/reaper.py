"""A watchdog for a local Ray cluster that raypex started: when the driver's process ends without
shutting Ray down (kill -9, the OOM killer), it ends every process of that cluster.

Ray's GCS, raylet and workers go with the driver, but its dashboard and runtime-env agents were
seen logging "Raylet is dead! Exiting" and then staying alive, orphaned (Ray 2.60). The watchdog
is a small process started before Ray. It holds the read end of a pipe whose only write end is
the driver's: when the driver's process ends, for any reason, the read returns. Every process of
the cluster inherits a token in its environment; after a short grace for a normal shutdown, the
watchdog kills those still carrying it.

Run as `python -m cluster.driver.reaper TOKEN` with the pipe as stdin (start_reaper does that).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

TOKEN_VARIABLE = "RAYPEX_CLUSTER_TOKEN"
GRACE_S = 2.0  # what a crashed driver's cluster gets to exit by itself
_write_ends: list[int] = []  # kept open for the life of the driver's process


def start_reaper() -> None:
    """Start the watchdog for the Ray cluster this process is about to start; every process
    started after this call (Ray's included) carries the token it looks for."""
    token = uuid.uuid4().hex
    read_end, write_end = os.pipe()  # not inherited by later children: only this process writes
    subprocess.Popen([sys.executable, "-m", "cluster.driver.reaper", token], stdin=read_end,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                     env={k: v for k, v in os.environ.items() if k != TOKEN_VARIABLE})
    os.close(read_end)
    _write_ends.append(write_end)
    os.environ[TOKEN_VARIABLE] = token


def processes_with(variable: str) -> list[int]:
    """Pids of the processes whose environment holds `variable` ("NAME=value"), this one excluded.

    The environment is read from /proc as raw bytes: Ray renames its processes (setproctitle),
    after which psutil's parsed `environ()` came back empty for them.
    """
    wanted = variable.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def cluster_variable(token: str) -> str:
    """The "NAME=value" every process of the cluster with this token carries."""
    return f"{TOKEN_VARIABLE}={token}"


def reap(token: str) -> int:
    """Kill every process whose environment carries `token`; returns how many."""
    killed = 0
    for pid in processes_with(cluster_variable(token)):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except OSError:
            continue  # gone meanwhile
    return killed


def main(token: str) -> None:
    """Wait for the driver's process to end, then reap what is left of its cluster."""
    while sys.stdin.buffer.read(4096):  # returns b"" once the driver's process has ended
        pass
    time.sleep(GRACE_S)
    reap(token)


if __name__ == "__main__":
    main(sys.argv[1])
