"""One local Ray cluster kept up for the whole test session (one in each pytest-xdist worker), which
runs join through RAYPEX_ADDRESS as README's "many short runs" advice has users do: each run then
skips a local cluster's start (5 s on a slow 2-core box) and its shutdown.

Runs that test a local cluster's own start, end, signals or processes do not join it; they
start their own as `raypex train` does without an address. Only runs in processes of their own
join it: a test process that started a local cluster in-process (as many tests do) cannot then
join another cluster reliably, Ray keeping that first cluster's settings in the process.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.test_address import free_port

TESTS = Path(__file__).parent
STARTED_LINE = "Ray runtime started."
# What a process that joins needs besides RAYPEX_ADDRESS: token authentication off, as on the
# cluster. A local cluster started in the test process (`raypex train` called in-process) sets
# RAY_AUTH_MODE=token in that process's environment, and a run started after it inherited that:
# its driver then refused the GCS's calls, and the GCS destroyed every actor it asked for.
JOIN_ENVIRONMENT = {"RAY_AUTH_MODE": "disabled"}
START_TIMEOUT_S = 120.0


@contextmanager
def kept_up_cluster(num_cpus: int) -> Iterator[str]:
    """`ray start --head` with `num_cpus` (what a local run gets), no token (JOIN_ENVIRONMENT)
    and MALLOC_ARENA_MAX=2 (what raypex gives its own local clusters); yields its address once
    `ray start` says the runtime started, and stops every process of it after."""
    port = free_port()
    # Its own Ray temp dir: `ray start` writes <temp dir>/ray_current_cluster, which plain
    # ray.init() and Ray's job supervisor (tests/test_ray_jobs.py) follow; in the shared /tmp/ray
    # it sent another worker's Ray job to this cluster.
    ray_temp = tempfile.mkdtemp(prefix="ray-kept-up-")
    # tests/ on its workers' path: the test pixel games (tests/pixel_env.py) resolve there as a
    # user's env module on PYTHONPATH must resolve on a cluster's nodes (README, "Your own environment")
    python_path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, **JOIN_ENVIRONMENT, "MALLOC_ARENA_MAX": "2", "PYTHONPATH": python_path}
    env.pop("RAY_ADDRESS", None)
    # Ray's fixed default ports go to free ones: a local cluster started beside this one (a test of
    # `raypex train` without an address) would otherwise find its dashboard agent's port taken,
    # and its raylet waits out the agent's six retries, 3.3 s, before it registers.
    fixed_ports = [f"--dashboard-agent-listen-port={free_port()}", f"--ray-client-server-port={free_port()}",
                   f"--dashboard-port={free_port()}"]
    head = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}",
                             *fixed_ports, f"--temp-dir={ray_temp}", f"--num-cpus={num_cpus}", "--include-dashboard=false",
                             "--disable-usage-stats", "--block"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: queue.Queue = queue.Queue()

    def read_output() -> None:
        for line in head.stdout:
            lines.put(line)
        lines.put(None)  # `ray start` exited

    threading.Thread(target=read_output, daemon=True).start()
    seen: list[str] = []
    try:
        while True:
            line = lines.get(timeout=START_TIMEOUT_S)
            if line is None:
                raise RuntimeError("the kept-up Ray cluster did not start:\n" + "".join(seen[-30:]))
            seen.append(line)
            if STARTED_LINE in line:
                break
        yield f"127.0.0.1:{port}"
    finally:
        # Every process of the cluster (GCS, raylet, agents, workers) is in `ray start`'s process
        # group; nothing is left to save, so they are killed at once (a SIGTERM took 33 s).
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        shutil.rmtree(ray_temp, ignore_errors=True)


def raypex_joined(args: list[str], joining: dict[str, str], env: dict[str, str] | None = None,
                  timeout_s: float = 300) -> subprocess.CompletedProcess:
    """`raypex ARGS` in a process of its own that joins the kept-up cluster (`joining`: the
    conftest fixture joining_environment), as a user's run joins one through RAYPEX_ADDRESS;
    its output captured as text. A test process cannot join in-process (see above)."""
    return subprocess.run([sys.executable, "-m", "raypex", *args], env={**os.environ, **joining, **(env or {})},
                          capture_output=True, text=True, timeout=timeout_s, check=False)

