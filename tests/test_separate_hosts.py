"""Three Ray nodes as three hosts: each in its own Linux network namespace with its own IP on a
private bridge (iproute2, as root), started with `ray start` the way a user starts them (token
authentication on), and `raypex train --address` run from the head's host. The collectors spread
over the three IPs, every shard in the learner's process (chunks cross hosts once, at insert),
and CartPole learns.

The env is the user's own: `env.id=my_cartpole:make` names a file that exists only where the
driver runs (a tmpfs mounted in the driver's own mount namespace, which no Ray node sees), so
every actor that builds it got the file from the run (Ray's runtime-env working directory).

Everything the test makes (namespaces, veth pairs, the bridge, the Ray processes) is removed
whatever happens. A machine that cannot make namespaces fails this test with the reason: the
suite runs as root, where it can."""

import ipaddress
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.test_integration import SHORT

GCS_PORT = 6379
MY_CARTPOLE = """import gymnasium as gym


def make(**kwargs):
    return gym.make("CartPole-v1", **kwargs)
"""


def ip(*args: str) -> None:
    """Run `ip ARGS`; AssertionError with iproute2's message when it fails."""
    done = subprocess.run(["ip", *args], check=False, capture_output=True, text=True)
    assert done.returncode == 0, f"`ip {' '.join(args)}` failed: {done.stderr.strip()}"


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.254.0.0/16 that no interface of this machine uses."""
    used = subprocess.run(["ip", "-o", "-4", "addr"], check=True, capture_output=True, text=True).stdout
    for third in random.Random(os.getpid()).sample(range(1, 255), 254):
        subnet = ipaddress.ip_network(f"10.254.{third}.0/24")
        if f"10.254.{third}." not in used:
            return subnet
    raise AssertionError("no free /24 in 10.254.0.0/16")


class Hosts:
    """`count` network namespaces joined by a bridge: host i has address `addresses[i]`."""

    def __init__(self, count: int, stack: ExitStack):
        tag = f"rpx{random.randrange(100_000):05d}"  # each set of hosts its own names, even in one process
        self.names = [f"{tag}n{i}" for i in range(count)]
        subnet = free_subnet()
        self.addresses = [str(subnet.network_address + i + 1) for i in range(count)]
        bridge = f"{tag}br"
        stack.callback(subprocess.run, ["ip", "link", "del", bridge], check=False, capture_output=True)
        ip("link", "add", bridge, "type", "bridge")
        ip("link", "set", bridge, "up")
        for i, name in enumerate(self.names):
            stack.callback(subprocess.run, ["ip", "netns", "del", name], check=False, capture_output=True)
            ip("netns", "add", name)
            outside, inside = f"{tag}v{i}", f"{tag}p{i}"
            stack.callback(subprocess.run, ["ip", "link", "del", outside], check=False, capture_output=True)
            ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            ip("link", "set", outside, "master", bridge, "up")
            ip("link", "set", inside, "netns", name)
            ip("-n", name, "addr", "add", f"{self.addresses[i]}/{subnet.prefixlen}", "dev", inside)
            ip("-n", name, "link", "set", inside, "up")
            ip("-n", name, "link", "set", "lo", "up")

    def command(self, i: int, *argv: str) -> list[str]:
        """`argv` run on host i."""
        return ["ip", "netns", "exec", self.names[i], *argv]

    def pids_on(self, i: int) -> list[int]:
        """The processes in host i's namespace (none once it is gone)."""
        return [int(pid) for pid in subprocess.run(["ip", "netns", "pids", self.names[i]], check=False,
                                                   capture_output=True, text=True).stdout.split()]

    def kill_everything_on(self, i: int) -> None:
        """SIGKILL every process left in host i's namespace."""
        for pid in self.pids_on(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def ray_start(hosts: Hosts, i: int, stack: ExitStack, cpus: int = 2, env: dict | None = None,
              own_tmp: bool = False) -> None:
    """`ray start` on host i (the head on host 0), `cpus` CPUs, stopped and killed at the end;
    `env`: more of its environment. `own_tmp`: the host's /tmp/ray is its own (a tmpfs in its own
    mount namespace), as a machine's is: Ray removes a host's copy of the run's shipped code there
    when it leaves, which on a shared /tmp was every host's copy."""
    role = (["--head", f"--port={GCS_PORT}", "--include-dashboard=false"] if i == 0
            else [f"--address={hosts.addresses[0]}:{GCS_PORT}"])
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", *role, f"--node-ip-address={hosts.addresses[i]}",
            f"--num-cpus={cpus}", "--disable-usage-stats", "--block"]
    env = {**os.environ, "RAY_AUTH_MODE": "token", **(env or {})}
    if own_tmp:
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mkdir -p /tmp/ray && mount -t tmpfs tmpfs /tmp/ray && exec "$@"', "sh", *argv]
    node = subprocess.Popen(hosts.command(i, *argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    stack.callback(hosts.kill_everything_on, i)
    stack.callback(node.wait, timeout=30)
    stack.callback(node.send_signal, signal.SIGTERM)


def hosts_with_ray(stack: ExitStack, cpus: list[int], env: dict | None = None, spare: int = 0) -> Hosts:
    """A host per entry of `cpus`, each with Ray started on it (the head on host 0) with that many
    CPUs, and `spare` hosts after them without Ray (yet), one after another (raylets that start at the same moment on one machine, one /tmp, one
    session directory, can pick the same socket names); the address file `ray start` leaves behind,
    which plain ray.init() would follow, is removed at the end unless it was there before."""
    address_file = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    if not address_file.exists():
        stack.callback(address_file.unlink, missing_ok=True)
    hosts = Hosts(len(cpus) + spare, stack)
    # as docs/guides/cluster.md has users start a cluster: a token first (kept if there is one), in
    # ~/.ray/auth_token, which every host here shares
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "get-auth-token", "--generate"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for i, count in enumerate(cpus):
        ray_start(hosts, i, stack, cpus=count, env=env)
        if i == 0:
            wait_for_port(hosts, 0, GCS_PORT)
        else:
            wait_for_nodes(hosts, i + 1)
    return hosts


def train_until_first_checkpoint(hosts: Hosts, stack: ExitStack, run: Path, log: Path, *overrides: str):
    """`raypex train` from the head's host with `overrides`, its stderr in `log`; returns the driver's
    process once the run has written placement.json and its first checkpoint set."""
    train = hosts.command(0, sys.executable, "-m", "raypex", "train", "--address", f"{hosts.addresses[0]}:{GCS_PORT}",
                          "--run-dir", str(run), *overrides)
    with open(log, "w") as out:
        driver = subprocess.Popen(train, stdout=subprocess.DEVNULL, stderr=out, env={**os.environ, "RAY_AUTH_MODE": "token"})
    stack.callback(driver.kill)
    deadline = time.monotonic() + 180
    while not list((run / "checkpoints").glob("ckpt-*.json")) or not (run / "placement.json").is_file():
        assert driver.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)  # a poll's pace: the loop ends on the files, not on time
    return driver


def test_three_hosts_in_network_namespaces_spread_the_collectors_and_learn(tmp_path, capsys):
    if os.geteuid() != 0:
        pytest.fail("making network namespaces needs root (CI runs as root); this test does not skip")
    run = tmp_path / "hosts"
    with ExitStack() as stack:
        hosts = hosts_with_ray(stack, [2, 2, 2])
        private = tmp_path / "driver-only"  # empty for everyone but the driver
        private.mkdir()
        train = [sys.executable, "-m", "raypex", "train", "--address", f"{hosts.addresses[0]}:{GCS_PORT}",
                 "--run-dir", str(run), "collectors.num=3", "env.id=my_cartpole:make", "stop.env_steps=80000",
                 *SHORT, "eval.episodes=16", "stop.eval_return=200"]
        script = (f"mount -t tmpfs none {private} && cd {private} && printf '%s' \"$ENV_FILE\" > my_cartpole.py "
                  f"&& exec {' '.join(train)}")
        done = subprocess.run(hosts.command(0, "unshare", "--mount", "sh", "-c", script), check=False,
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "RAY_AUTH_MODE": "token", "ENV_FILE": MY_CARTPOLE})
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"{private} goes to every actor as its working directory" in done.stderr, done.stderr[-3000:]
        assert not list(private.iterdir())  # the file never existed outside the driver's namespace
    placement = json.loads((run / "placement.json").read_text())
    node_ips = placement["node_ips"]
    collector_ips = [node_ips[c["collector_node"]] for c in placement["collectors"]]
    learner_ip = node_ips[placement["learner_node"]]
    with capsys.disabled():  # into the suite's log (.ci/run's included), not only on failure
        print(f"\nseparate hosts {hosts.addresses}: learner and replay on {learner_ip}, collectors on {collector_ips}")
    assert sorted(collector_ips) == sorted(hosts.addresses)  # one collector on each host
    assert node_ips[placement["replay_node"]] == learner_ip  # every shard beside the learner
    result = json.loads((run / "summary.json").read_text())
    assert result["time_to_solve_s"] is not None and result["final_eval_return"] >= 200, result
    # chunks from the hosts without the learner reached their shards, and the counts add up: every
    # env step counted is a transition that reached replay
    inserted = result["replay_inserted_per_shard"]
    assert len(inserted) == 3 and min(inserted) > 0 and result["env_steps"] == sum(inserted), result


def wait_for_nodes(hosts: Hosts, count: int, timeout_s: float = 60) -> None:
    """Until the head's cluster has `count` alive nodes (the worker hosts joined)."""
    script = (f"import ray, time\nray.init(address='{hosts.addresses[0]}:{GCS_PORT}', logging_level='ERROR')\n"
              f"deadline = time.monotonic() + {timeout_s}\n"
              f"while sum(n['Alive'] for n in ray.nodes()) < {count}:\n"
              "    assert time.monotonic() < deadline, ray.nodes()\n    time.sleep(0.5)\n")
    done = subprocess.run(hosts.command(0, sys.executable, "-c", script), check=False, capture_output=True,
                          text=True, timeout=timeout_s + 60, env={**os.environ, "RAY_AUTH_MODE": "token"})
    assert done.returncode == 0, f"the hosts did not all join: {done.stderr[-2000:]}"


def wait_for_port(hosts: Hosts, i: int, port: int, timeout_s: float = 60) -> None:
    """Until something listens on `port` of host i (the head's GCS)."""
    deadline = time.monotonic() + timeout_s
    probe = hosts.command(i, sys.executable, "-c",
                          f"import socket; socket.create_connection(('{hosts.addresses[i]}', {port}), 1)")
    while subprocess.run(probe, check=False, capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, f"nothing listens on {hosts.addresses[i]}:{port}"
        time.sleep(0.5)


def test_the_learners_host_taken_away_mid_run_the_run_revives_it_elsewhere_and_ends_normally(tmp_path):
    """A spot instance taken back: three hosts, the head (the driver's, no CPUs for actors) and two
    that can each hold the whole run; once a checkpoint set with replay is written, every process
    on the learner's host is killed. Ray notices the node is gone and restarts the learner (and
    any collector that was there) on the other host; the driver revives the learner from that set
    with its replay, and the run ends at stop.env_steps with rc 0, its counts adding up: every env
    step is a transition stored, or one lost with the node (summary.json counts them)."""
    if os.geteuid() != 0:
        pytest.fail("making network namespaces needs root (CI runs as root); this test does not skip")
    run = tmp_path / "lost-node"
    # the head declares a node dead after 3 missed health checks 0.5 s apart (Ray's default: 5 x 3 s)
    quick_death = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3"}
    log = tmp_path / "driver.log"
    with ExitStack() as stack:
        hosts = hosts_with_ray(stack, [0, 4, 4], env=quick_death)
        # long enough that the kill lands mid-run and the lost collector's 4 s pass before the end,
        # even when a loaded box delays the kill by seconds (the run trains 4-5k env steps a second
        # with both collectors, half that with one)
        driver = train_until_first_checkpoint(hosts, stack, run, log, "collectors.num=2", "stop.env_steps=50000",
                                              *SHORT, "checkpoint.replay=true", "collectors.come_back_s=4")
        placement = json.loads((run / "placement.json").read_text())
        learner_host = hosts.addresses.index(placement["node_ips"][placement["learner_node"]])
        assert learner_host != 0
        hosts.kill_everything_on(learner_host)
        try:
            driver.wait(timeout=180)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the run did not end after its learner's host was lost:\n{log.read_text()[-3000:]}")
    err = log.read_text()
    assert driver.returncode == 0, err[-3000:]
    assert "the learner died; a new one continues from the checkpoint of epoch" in err, err[-3000:]
    assert "replay restored from the checkpoint" in err, err[-3000:]
    result = json.loads((run / "summary.json").read_text())
    assert result["ended"] == "env_steps" and result["learner_restarts"] == 1, result
    moved = json.loads((run / "placement.json").read_text())  # rewritten once the learner came back
    assert moved["node_ips"][moved["learner_node"]] not in (hosts.addresses[0], hosts.addresses[learner_host]), moved
    stored, lost = sum(result["replay_inserted_per_shard"]), result["replay_lost_transitions"]
    # lost is often > 0 but can be 0: the kill may land before any chunk reached the learner after
    # the set's snapshot (the snapshot holds inserts back); what must hold is that nothing goes uncounted
    assert result["env_steps"] == stored + lost, result
    # a collector that was on the lost host cannot come back (one collector per node, and the other
    # node has one): the run went on without it, and said so
    lost_collectors = [c["collector"] for c in placement["collectors"]
                       if placement["node_ips"][c["collector_node"]] == hosts.addresses[learner_host]]
    for i in lost_collectors:
        assert (f"collector {i} has not come back 4s after its process died (its node is gone, and no node has "
                "room for it): the run goes on with 1 collector") in err, err[-3000:]



SLOW_CARTPOLE = """import time

import gymnasium as gym


class SlowStep(gym.Wrapper):
    \"\"\"CartPole whose step costs a millisecond, as a heavier simulator's would.\"\"\"

    def step(self, action):
        time.sleep(0.001)
        return self.env.step(action)


def make(**kwargs):
    return SlowStep(gym.make("CartPole-v1", **kwargs))
"""

# Run on the head's host: joins the cluster, finds the run's learner (placement.json) and waits
# until each shard named took more than its count, printing every shard's counters; or drains the
# node at an IP as a preemptible VM's notice does (Ray's drain with a deadline).
ON_HEAD = """import json, sys, time
import ray
from ray.core.generated import autoscaler_pb2

ray.init(address=sys.argv[1], logging_level="ERROR")
if sys.argv[2] == "drain":
    node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == sys.argv[3])
    gcs = ray._raylet.GcsClient(address=sys.argv[1])
    reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
    accepted, why = gcs.drain_node(node, reason, "preempted", int((time.time() + 60) * 1000))
    assert accepted, why
    sys.exit(0)
placement = json.loads(open(sys.argv[3]).read())
learner = ray.get_actor(f"raypex-{placement['run_id']}-learner", namespace=placement["namespace"])
beyond = json.loads(sys.argv[4])  # {shard: count}
deadline = time.monotonic() + 30
while True:
    stats = ray.get(learner.replay_stats.remote())
    if all(stats[int(shard)].inserted > count for shard, count in beyond.items()):
        break
    assert time.monotonic() < deadline, f"the shards took nothing new within 30 s: {stats}"
    time.sleep(0.2)  # a poll's pace: the loop ends on the counters
print(json.dumps([{"inserted": s.inserted, "lost": s.lost_writes, "size": s.size, "capacity": s.capacity}
                  for s in stats]))
"""


def on_head(hosts: Hosts, *args: str) -> str:
    """ON_HEAD run on the head's host with `args`; its output (AssertionError with its stderr if it failed)."""
    done = subprocess.run(hosts.command(0, sys.executable, "-c", ON_HEAD, f"{hosts.addresses[0]}:{GCS_PORT}", *args),
                          check=False, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAY_AUTH_MODE": "token"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def shards_read(hosts: Hosts, placement: str, beyond: dict[str, int]) -> list[dict]:
    """Every shard's counters once those in `beyond` took more than their count; the replay is
    collectors.max shards of replay.capacity (100,000 here) however many collectors there are."""
    shards = json.loads(on_head(hosts, "inserts", placement, json.dumps(beyond)))
    assert [s["capacity"] for s in shards] == [100_000] * 4 and all(s["size"] <= s["capacity"] for s in shards), shards
    return shards


def best_eval(events: EventAccumulator) -> float:
    """The best evaluation mean a run's TensorBoard events hold so far (-inf: none yet)."""
    events.Reload()
    if "eval/return_mean" not in events.Tags()["scalars"]:
        return float("-inf")
    return max(point.value for point in events.Scalars("eval/return_mean"))


def test_collectors_follow_hosts_that_join_drain_and_die_and_the_run_solves(tmp_path):
    """collectors.num auto across hosts: the learner's host (no room for collectors) and one
    collector host at the start; a second host joins and its collectors write to their shards
    within 30 s; it is drained with a deadline (a preemptible VM's notice) and its collectors leave
    with every chunk stored (nothing lost); a third host takes their slots, writes, and is killed
    with -9 (what it had in flight counts as lost). Once both of its collectors are settled as gone and
    an evaluation has solved CartPole (475, gymnasium's threshold), the run is stopped as a
    scheduler stops a job (SIGTERM: exit 143, `ended: terminated`); its env steps are what the
    shards stored plus what was lost, and the replay never had more than collectors.max shards.

    The run does not end on solving, so the hosts' comings and goings cannot find it over; the
    env's step costs a millisecond, so those 20-30 s of collecting stay far below stop.env_steps
    (at most 4 collectors x 1,000 env steps a second), which only bounds a run that never solves.
    The test stops it rather than waiting for stop.env_steps: on a loaded machine the learner's
    pace, and with it the run's, fell to half, and those env steps were nothing the test reads."""
    if os.geteuid() != 0:
        pytest.fail("making network namespaces needs root (CI runs as root); this test does not skip")
    run, log, code = tmp_path / "elastic", tmp_path / "driver.log", tmp_path / "code"
    code.mkdir()
    (code / "slow_cartpole.py").write_text(SLOW_CARTPOLE)
    quick_death = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3"}
    with ExitStack() as stack:
        # the learner asks for 2 CPUs, which only the head has: it has no room for collectors then
        hosts = hosts_with_ray(stack, [2], env=quick_death, spare=3)
        ray_start(hosts, 1, stack, cpus=1, env=quick_death, own_tmp=True)
        wait_for_nodes(hosts, 2)
        train = hosts.command(0, sys.executable, "-m", "raypex", "train", "--address", f"{hosts.addresses[0]}:{GCS_PORT}",
                              "--run-dir", str(run), "collectors.num=auto", "collectors.max=4", "collectors.per_node=2",
                              "learner.num_cpus=2", "env.id=slow_cartpole:make", "eval.every_env_steps=1000",
                              "eval.episodes=8", "stop.eval_return=null", "stop.env_steps=120000")
        with open(log, "w") as out:
            driver = subprocess.Popen(train, cwd=code, stdout=subprocess.DEVNULL, stderr=out,
                                      env={**os.environ, "RAY_AUTH_MODE": "token"})
        stack.callback(driver.kill)
        deadline = time.monotonic() + 180
        while "collectors 0, 1 joined on node" not in log.read_text() or not (run / "placement.json").is_file():
            assert driver.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)  # a poll's pace: the loop ends on the file
        placement = str(run / "placement.json")
        shards_read(hosts, placement, {"0": 0, "1": 0})
        ray_start(hosts, 2, stack, cpus=1, env=quick_death, own_tmp=True)  # a second collector host joins
        wait_for_nodes(hosts, 3)
        joined = shards_read(hosts, placement, {"2": 0, "3": 0})  # within 30 s
        on_head(hosts, "drain", hosts.addresses[2])
        while log.read_text().count("left its draining node") < 2:
            assert driver.poll() is None and time.monotonic() < deadline + 120, log.read_text()[-3000:]
            time.sleep(0.2)
        drained = shards_read(hosts, placement, {"0": 0})
        assert [s["lost"] for s in drained] == [0, 0, 0, 0] and drained[2]["inserted"] >= joined[2]["inserted"], drained
        hosts.kill_everything_on(2)  # the drained VM goes
        ray_start(hosts, 3, stack, cpus=1, env=quick_death, own_tmp=True)  # a third host takes the free slots
        took = {"2": drained[2]["inserted"], "3": drained[3]["inserted"]}
        shards_read(hosts, placement, took)
        hosts.kill_everything_on(3)  # without notice
        events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
        while log.read_text().count(" is gone (") < 2 or best_eval(events) < 475:
            assert driver.poll() is None and time.monotonic() < deadline + 600, log.read_text()[-3000:]
            time.sleep(1.0)  # a poll's pace: the loop ends on the log and the evaluations
        driver.send_signal(signal.SIGTERM)
        try:
            driver.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the run did not end:\n{log.read_text()[-3000:]}")
    err = log.read_text()
    assert driver.returncode == 143 and "Traceback" not in err, err[-3000:]
    result = json.loads((run / "summary.json").read_text())
    assert result["ended"] == "terminated", result
    events.Reload()
    assert max(point.value for point in events.Scalars("perf/collectors")) == 4
    stored, lost = sum(result["replay_inserted_per_shard"]), result["replay_lost_transitions"]
    assert result["env_steps"] == stored + lost and len(result["replay_inserted_per_shard"]) == 4, result
    assert "| collectors 2" in err, err[-3000:]  # the progress line says how many (every 10 s in a log)
    counts = [count for _, count in result["collectors_over_time"]]  # two hosts came and went
    assert counts[0] == counts[-1] == 2 and sum(a < 4 == b for a, b in zip(counts, counts[1:])) == 2, result
    history = json.loads((run / "placement.json").read_text())["collector_history"]
    assert [(h["collector"], h["ip"], h["left"]) for h in history] == [
        (0, hosts.addresses[1], "run ended"), (1, hosts.addresses[1], "run ended"),
        (2, hosts.addresses[2], "drained"), (3, hosts.addresses[2], "drained"),
        (2, hosts.addresses[3], "lost"), (3, hosts.addresses[3], "lost")], history
