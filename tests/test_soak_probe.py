"""Connecting to a fresh local cluster (cluster/ray_runtime/wiring.py `connect`), one cluster for three
checks: raypex's stop signals survive `ray.init` (down to the handler the process runs), every process of the cluster has glibc's malloc
arenas capped, and the soak's object-store probe reads that cluster wherever Ray's address
resolution would point."""

import ctypes
import os
import signal
from pathlib import Path

import numpy as np
import ray

from raypex.cluster.bench.soak import object_store_mib
from raypex.cluster.driver import signals
from raypex.cluster.ray_runtime.reaper import TOKEN_VARIABLE, cluster_processes, cluster_variable
from raypex.cluster.ray_runtime.wiring import connect, shutdown
from tests.test_address import free_port


def test_connect_keeps_the_stop_signals_and_the_probe_reads_this_cluster_not_a_dead_address(monkeypatch, tmp_path,
                                                                                            caplog):
    """`ray.init` installs its own SIGTERM handler (a bare exit with Ray's stack dump: a SIGTERM to
    `raypex bench` printed one); `connect` puts raypex's back for every command that connects.
    `ray start` stopped by a signal leaves /tmp/ray/ray_current_cluster behind with a dead GCS in
    it, and the soak followed it and failed (RAY_ADDRESS points the same way, and comes first).
    A learner's memory grew by about 9 MB a minute with glibc's default malloc arenas (one per
    thread of Ray's) and about 3 MB with two (`raypex bench --soak`): each process of the
    cluster, the raylet's workers among them, inherits the cap. Ray's start says nothing raypex's
    own lines do not: not that the local cluster got a token (every one does), nor that a shipped
    working directory's .venv is left out (raypex leaves it out itself, and says what goes)."""
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    signals.install_stop_signals()
    python_handler = process_handler(signal.SIGTERM)  # the C function through which Python runs its handlers
    (tmp_path / "code" / ".venv").mkdir(parents=True)
    (tmp_path / "code" / "my_env.py").write_text("")
    connect(None, tmp_path / "code")
    try:
        handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        # what the process runs on SIGTERM: Ray's core worker puts its own handler (a stack dump, then
        # abort) below Python's, where signal.getsignal does not look
        after_connect = process_handler(signal.SIGTERM)
        processes = cluster_processes(cluster_variable(os.environ[TOKEN_VARIABLE]))
        # the GCS, the raylet and the idle workers that become actors (Ray's agents write their
        # process titles over part of their environment, so it cannot be read back from them)
        arenas = {(pid, name): _environment(pid).get("MALLOC_ARENA_MAX") for pid in processes
                  if (name := _name(pid)) in ("gcs_server", "raylet", "ray::IDLE")}
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{free_port()}")  # nothing listens there
        held = ray.put(np.zeros(16 << 20, np.uint8))  # 16 MiB the probe must see in this cluster's store
        used, spilled = object_store_mib()
        del held
    finally:
        shutdown()
    assert handlers == (signals._raise_on_signal, signals._raise_on_signal)
    assert after_connect == python_handler, "Ray's SIGTERM handler replaced Python's"
    assert {name for _, name in arenas} == {"gcs_server", "raylet", "ray::IDLE"}, arenas
    assert set(arenas.values()) == {"2"}, arenas
    said = [record.getMessage() for record in caplog.records]
    assert not [line for line in said if "authentication" in line or "ignored by default" in line], said
    assert used >= 16 and spilled == 0


class _Sigaction(ctypes.Structure):
    """The leading fields of Linux's struct sigaction (glibc's layout): the handler comes first."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


def process_handler(signum: int) -> int:
    """The address of the C function the process runs on `signum` (sigaction, read only)."""
    current = _Sigaction()
    assert ctypes.CDLL(None).sigaction(signum, None, ctypes.byref(current)) == 0
    return current.handler


def _environment(pid: int) -> dict[str, str]:
    """A process's environment as it started, from /proc."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # it ended meanwhile
        return {}
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
