"""Connecting to a fresh local cluster (cluster/ray_runtime/wiring.py `connect`), one cluster for two
checks: raypex's stop signals survive `ray.init`, and the soak's object-store probe reads that
cluster wherever Ray's address resolution would point."""

import signal

import numpy as np
import ray

from raypex.cluster.bench.soak import object_store_mib
from raypex.cluster.driver import signals
from raypex.cluster.ray_runtime.wiring import connect, shutdown
from tests.test_address import free_port


def test_connect_keeps_the_stop_signals_and_the_probe_reads_this_cluster_not_a_dead_address(monkeypatch):
    """`ray.init` installs its own SIGTERM handler (a bare exit with Ray's stack dump: a SIGTERM to
    `raypex bench` printed one); `connect` puts raypex's back for every command that connects.
    `ray start` stopped by a signal leaves /tmp/ray/ray_current_cluster behind with a dead GCS in
    it, and the soak followed it and failed (RAY_ADDRESS points the same way, and comes first)."""
    connect(None)
    try:
        handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{free_port()}")  # nothing listens there
        held = ray.put(np.zeros(16 << 20, np.uint8))  # 16 MiB the probe must see in this cluster's store
        used, spilled = object_store_mib()
        del held
    finally:
        shutdown()
    assert handlers == (signals._raise_on_signal, signals._raise_on_signal)
    assert used >= 16 and spilled == 0
