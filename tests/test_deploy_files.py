"""The deployment files in cluster/deploy/ (Ray cluster launcher, KubeRay, Dockerfile) cannot run
here (no cloud, no Kubernetes, no Docker), so what can be checked is: they parse, the raypex
commands they run are real commands with real config keys, and the nodes they ask for hold what
those commands' configs ask Ray for (placement's own fit check, with the nodes the files declare).
"""

import io
import re
import shlex
from pathlib import Path

import pytest
import tomllib
import yaml

from raypex.cluster.commands.cli import build_parser, parse_command_line
from raypex.cluster.config.arguments import split_positional
from raypex.cluster.config.loading import load_config
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.plan.elastic import CollectorSlots, Node
from raypex.cluster.ray_runtime.devices import choose_act_device, with_act_device
from raypex.cluster.ray_runtime.placement import ResourceRequest, check_fits
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.run_errors import PlacementError
from raypex.cluster.ray_runtime.wiring import resource_request

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "cluster" / "deploy"
# CPUs and GPUs of the instance types the launcher file names (AWS's published shapes)
INSTANCE_SHAPES = {"g5.4xlarge": {"CPU": 16.0, "GPU": 1.0}, "c7i.4xlarge": {"CPU": 16.0}}


def train_config(command: str) -> RunConfig:
    """The resolved config of a `raypex train ...` command line (env assignments before it allowed);
    raises on an unknown subcommand, option or config key."""
    words = shlex.split(command)
    argv = words[words.index("raypex") + 1:]
    args = parse_command_line(build_parser(), argv)
    assert args.command == "train", command
    config_path, overrides = split_positional(args.args)
    return load_config(config_path, overrides)


def request_of(config: RunConfig, nodes: list[dict[str, float]]) -> ResourceRequest:
    """What `raypex train` asks of these nodes for Pong: the learner on the GPU, and collectors acting where
    collectors.act_device auto puts them (their CPUs when some node has no GPU)."""
    act_device = choose_act_device(config, nodes, "cuda", True, ProgressLine(io.StringIO()))
    return resource_request(with_act_device(config, act_device), "cuda")


def pod_nodes(cluster_spec: dict) -> list[dict[str, float]]:
    """The Ray nodes a KubeRay cluster spec makes: the head (its num-cpus) and every worker replica."""
    def shape(group: dict) -> dict[str, float]:
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        node = {"CPU": float(group.get("rayStartParams", {}).get("num-cpus", limits["cpu"]))}
        if "nvidia.com/gpu" in limits:
            node["GPU"] = float(limits["nvidia.com/gpu"])
        return node

    nodes = [shape(cluster_spec["headGroupSpec"])]
    for group in cluster_spec["workerGroupSpecs"]:
        nodes += [shape(group)] * group["replicas"]
    return nodes


def test_the_kuberay_job_runs_a_real_command_that_its_pods_can_hold():
    job = yaml.safe_load((DEPLOY / "kuberay-rayjob.yaml").read_text())
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    config = train_config(job["spec"]["entrypoint"])
    nodes = pod_nodes(job["spec"]["rayClusterSpec"])
    assert any(n.get("GPU") for n in nodes)  # the learner's group
    check_fits(request_of(config, nodes), nodes)  # raises, naming what is missing, when it does not fit
    # the same command on one collector pod fewer no longer fits: the file is sized, not padded
    spec = job["spec"]["rayClusterSpec"]
    spec["workerGroupSpecs"][-1]["replicas"] -= 1
    with pytest.raises(PlacementError, match="do not fit|needs"):
        check_fits(request_of(config, pod_nodes(spec)), pod_nodes(spec))


def test_the_kuberay_cluster_holds_the_command_its_header_gives():
    text = (DEPLOY / "kuberay-raycluster.yaml").read_text()
    cluster = yaml.safe_load(text)
    assert cluster["kind"] == "RayCluster"
    command = re.search(r"-- (raypex train .*)", text).group(1)
    nodes = pod_nodes(cluster["spec"])
    check_fits(request_of(train_config(command), nodes), nodes)


def test_the_launcher_file_starts_nodes_that_hold_its_command():
    text = (DEPLOY / "ray-cluster-aws.yaml").read_text()
    launcher = yaml.safe_load(text)
    types = launcher["available_node_types"]
    head = INSTANCE_SHAPES[types[launcher["head_node_type"]]["node_config"]["InstanceType"]]
    nodes = [head]
    for name, node_type in types.items():
        if name != launcher["head_node_type"]:
            nodes += [INSTANCE_SHAPES[node_type["node_config"]["InstanceType"]]] * node_type["min_workers"]
    command = re.search(r'"[^"]*?(RAY_AUTH_MODE=token raypex train [^"]*)"', text).group(1)
    check_fits(request_of(train_config(command), nodes), nodes)
    # raypex is installed on every node, with the extras that exist
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installs = [c for c in launcher["setup_commands"] if "pip install -e" in c]
    assert installs and set(re.search(r"\[([\w,]+)\]", installs[0]).group(1).split(",")) <= set(extras)
    assert "RAY_AUTH_MODE=token" in " ".join(launcher["worker_start_ray_commands"])


def test_the_dockerfile_copies_every_package_and_installs_real_extras():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    rooms = set(setuptools["package-dir"].values())  # raypex and the folders mapped under it
    copied = set(re.findall(r"^COPY (\w+) ", dockerfile, re.MULTILINE))
    assert rooms <= copied, rooms - copied
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = re.search(r'pip install --no-cache-dir "\.\[([\w,]+)\]"', dockerfile).group(1).split(",")
    assert set(wanted) <= set(extras)


def dashboard_hosts(text: str) -> list[str]:
    """Every address a file tells Ray's dashboard to listen on (launcher flags and KubeRay's
    rayStartParams); Ray's own default, when none is given, is the loopback."""
    return re.findall(r"dashboard-host[=:]\s*\"?([\d.]+)", text)


@pytest.mark.parametrize("name", ["kuberay-raycluster.yaml", "kuberay-rayjob.yaml"])
def test_kuberay_files_turn_token_auth_on_and_keep_the_dashboard_inside(name):
    text = (DEPLOY / name).read_text()
    spec = yaml.safe_load(text)["spec"]
    cluster = spec.get("rayClusterSpec", spec)
    assert cluster["authOptions"]["mode"] == "token", name
    assert tuple(int(p) for p in cluster["rayVersion"].split(".")[:2]) >= (2, 54)  # token auth and the CVE fix
    hosts = dashboard_hosts(text)
    assert hosts, name
    # On all the pod's addresses only in the job file, where KubeRay's submitter reaches it through
    # the head's Service; token auth guards it there.
    assert all(host == "127.0.0.1" for host in hosts) or name == "kuberay-rayjob.yaml", hosts
    # the learner's pod sees the run directory, where it writes its shards' replay checkpoints
    learner = next(g for g in cluster["workerGroupSpecs"] if g["groupName"] == "learner-gpu")
    mounts = learner["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "runs", "mountPath": "/runs"} in mounts


def test_the_launcher_file_starts_every_node_with_token_auth_and_no_public_dashboard():
    launcher = yaml.safe_load((DEPLOY / "ray-cluster-aws.yaml").read_text())
    starts = launcher["head_start_ray_commands"] + launcher["worker_start_ray_commands"]
    ray_starts = [command for command in starts if "ray start" in command]
    assert ray_starts and all("RAY_AUTH_MODE=token" in command for command in ray_starts), ray_starts
    assert dashboard_hosts(" ".join(ray_starts)) == ["127.0.0.1"]
    assert "~/.ray/auth_token" in launcher["file_mounts"]


def test_ray_is_required_at_a_version_with_token_auth_and_the_job_deletion_fix():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["cluster"],
                    *project["optional-dependencies"]["tune"]]
    floors = [re.match(r"ray(\[\w+\])?>=([\d.]+)", r).group(2) for r in requirements if r.startswith("ray")]
    assert len(floors) == 3 and all(tuple(map(int, f.split("."))) >= (2, 54) for f in floors), floors


def collector_room(config: RunConfig, nodes: list[dict[str, float]], learner_node: int) -> int:
    """How many collectors of a config with collectors.num auto these nodes take (the learner's
    CPUs off its node), as the run's slots decide it."""
    slots = CollectorSlots(config.collectors.max, config.collectors.per_node, config.collectors.num_cpus)
    return sum(slots.wanted_on(Node(str(i), node["CPU"], config.learner.num_cpus if i == learner_node else 0.0))
               for i, node in enumerate(nodes))


def test_the_kuberay_cluster_scales_a_spot_group_from_zero_for_collectors_that_follow_it():
    text = (DEPLOY / "kuberay-raycluster.yaml").read_text()
    spec = yaml.safe_load(text)["spec"]
    assert spec["enableInTreeAutoscaling"] is True
    spot = next(group for group in spec["workerGroupSpecs"] if group["groupName"] == "collectors-spot")
    assert spot["replicas"] == spot["minReplicas"] == 0
    config = train_config(re.findall(r"-- (raypex train .*)", text)[1])
    assert config.collectors.elastic
    nodes = pod_nodes(spec)  # as the cluster starts: the learner fits, the collectors do not all
    check_fits(request_of(config, nodes), nodes)
    learner_node = next(i for i, node in enumerate(nodes) if node.get("GPU"))
    assert collector_room(config, nodes, learner_node) < config.collectors.max
    for group in spec["workerGroupSpecs"]:
        group["replicas"] = group["maxReplicas"]
    assert collector_room(config, pod_nodes(spec), learner_node) >= config.collectors.max  # the autoscaler's most


def test_the_launcher_file_has_spot_collector_nodes_from_zero_for_collectors_that_follow_the_cluster():
    text = (DEPLOY / "ray-cluster-aws.yaml").read_text()
    launcher = yaml.safe_load(text)
    types = launcher["available_node_types"]
    assert types["collectors_spot"]["min_workers"] == 0
    assert types["collectors_spot"]["node_config"]["InstanceMarketOptions"]["MarketType"] == "spot"
    config = train_config(re.findall(r'"[^"]*?(RAY_AUTH_MODE=token raypex train [^"]*)"', text)[1])
    assert config.collectors.elastic
    shape = {name: INSTANCE_SHAPES[t["node_config"]["InstanceType"]] for name, t in types.items()}
    head = [shape[launcher["head_node_type"]]]
    workers = [name for name in types if name != launcher["head_node_type"]]
    at_start = head + [shape[name] for name in workers for _ in range(types[name]["min_workers"])]
    at_most = head + [shape[name] for name in workers for _ in range(types[name]["max_workers"])]
    assert sum(types[name]["max_workers"] for name in workers) <= launcher["max_workers"]
    assert collector_room(config, at_start, 0) < config.collectors.max <= collector_room(config, at_most, 0)
