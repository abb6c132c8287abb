"""The soak's object-store probe reads the run's own local cluster (a real one), wherever Ray's
address resolution would point: `ray start` stopped by a signal leaves /tmp/ray/ray_current_cluster
behind with a dead GCS in it, and the soak followed it and failed (RAY_ADDRESS points the same way,
and comes first)."""

from cluster.bench.soak import object_store_mib
from cluster.driver.wiring import connect, shutdown
from tests.test_address import free_port


def test_the_object_store_probe_reads_this_cluster_not_a_dead_address(monkeypatch):
    connect(None)
    try:
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{free_port()}")  # nothing listens there
        used, spilled = object_store_mib()
    finally:
        shutdown()
    assert used >= 0 and spilled == 0
