"""Collectors that follow the cluster with Ray's own autoscaler: ray.cluster_utils.AutoscalingCluster
(Ray's fake node provider for tests, no cloud) starts worker nodes when asked for resources, each a
real raylet on this machine. A run with collectors.num auto and collectors.max above what the
cluster holds asks for room for them, and the nodes the autoscaler starts get its collectors.

The fake cluster's start runs `ray stop --force`, which stops every Ray process it can see: it
runs in a host of its own (a network namespace, tests/test_separate_hosts.py) with its own process
ids and its own /tmp/ray, so it sees only its own, and the suite's other clusters live on."""

import json
import os
import subprocess
import sys
from contextlib import ExitStack

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.test_separate_hosts import Hosts, ip

# On the host: Ray's fake autoscaling cluster, started as ray.cluster_utils.AutoscalingCluster
# starts it (whose own template is not in Ray's wheel): a head with one CPU, for the learner
# alone, and worker nodes of one CPU each, none at first; then `raypex train --address auto` on it.
IN_THE_HOST = """import json, os, subprocess, sys, tempfile

config = {
    "cluster_name": "raypex-autoscaling-test", "max_workers": 2,
    "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                 "disable_launch_config_check": True},
    "available_node_types": {
        "ray.head.default": {"resources": {"CPU": 1}, "node_config": {}, "max_workers": 0},
        "cpu_node": {"resources": {"CPU": 1}, "node_config": {}, "min_workers": 0, "max_workers": 2}},
    "head_node_type": "ray.head.default", "auth": {}, "upscaling_speed": 1.0, "idle_timeout_minutes": 5,
    "docker": {}, "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
    "worker_setup_commands": [], "head_start_ray_commands": [], "worker_start_ray_commands": [],
    "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
    "rsync_exclude": [], "rsync_filter": []}
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(config, f)
env = {**os.environ, "AUTOSCALER_UPDATE_INTERVAL_S": "1", "RAY_FAKE_CLUSTER": "1"}
ray = [sys.executable, "-m", "ray.scripts.scripts"]
subprocess.run([*ray, "start", "--head", "--num-cpus=1", f"--autoscaling-config={f.name}", "--disable-usage-stats",
                "--include-dashboard=false"], check=True, env=env, capture_output=True)
try:
    done = subprocess.run([sys.executable, "-m", "raypex", "train", "--address", "auto", "--run-dir", sys.argv[1],
                           "collectors.num=auto", "collectors.max=4", "collectors.per_node=2", "learner.num_cpus=1",
                           "stop.eval_return=null", "stop.env_steps=30000", "replay.min_size=500"],
                          capture_output=True, text=True, timeout=400)
    sys.stderr.write(done.stderr)
    sys.exit(done.returncode)
finally:
    subprocess.run([*ray, "stop", "--force"], capture_output=True)  # this host's processes only
"""


def test_collectors_above_the_clusters_room_make_the_autoscaler_start_nodes_that_get_them(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("making namespaces needs root (CI runs as root); this test does not skip")
    run = tmp_path / "autoscaled"
    with ExitStack() as stack:
        hosts = Hosts(1, stack)
        ip("-n", hosts.names[0], "route", "add", "default", "dev", f"{hosts.names[0][:-2]}p0")  # Ray finds its IP by route
        done = subprocess.run(
            hosts.command(0, "unshare", "--pid", "--fork", "--mount-proc", "--mount", "--propagation", "private",
                          "sh", "-c", 'mkdir -p /tmp/ray && mount -t tmpfs tmpfs /tmp/ray && exec "$@"', "sh",
                          sys.executable, "-c", IN_THE_HOST, str(run)),
            check=False, capture_output=True, text=True, timeout=600,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    (tmp_path / "driver.log").write_text(done.stderr)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((run / "summary.json").read_text())
    assert max(count for _, count in result["collectors_over_time"]) == 4, result
    placement = json.loads((run / "placement.json").read_text())
    nodes = {entry["node"] for entry in placement["collector_history"]}
    # two worker nodes the autoscaler started, two collectors each; none beside the learner
    assert len(nodes) == 2 and placement["learner_node"] not in nodes, placement
    assert result["env_steps"] == sum(result["replay_inserted_per_shard"]) + result["replay_lost_transitions"], result
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert max(point.value for point in events.Scalars("perf/collectors")) == 4
