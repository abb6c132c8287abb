"""The Ray wiring of a run: connecting to Ray, the placement groups and every actor.

What connects to what is planned once in cluster/plan/topology.py (the local wiring in
cluster/local/wiring.py builds the same plan without Ray); this file makes those connections with
Ray's actors: the learner hosts the replay, each collector gets its learner's name and its shard's
index there (chunks), the (first) learner gets every collector's name (weights), the driver keeps
the evaluator. Several learners (learner.num) are one actor each; the first, a GroupLead
(cluster/hosts/learner_group.py), holds the others by name and answers the driver for them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raypex.actors.acting_line import socket_address
from raypex.actors.envs import EnvSpec
from raypex.actors.settings import CollectorSettings
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.ray_runtime.address import ConnectError, check_gcs_auth, check_gcs_port, join_failed
from raypex.cluster.ray_runtime.devices import gpu_requests
from raypex.cluster.ray_runtime.placement import (
    Reservation,
    ResourceRequest,
    alive_nodes,
    check_cpus_fit_one_node,
    node_addresses,
    reserve,
)
from raypex.cluster.ray_runtime.reaper import (
    TOKEN_VARIABLE,
    cluster_processes,
    cluster_variable,
    confirm_reaper,
    reap,
    start_reaper,
)
from raypex.cluster.driver.signals import install_stop_signals, reinstall_stop_signals
from raypex.cluster.hosts.acting_server_actor import ActingServerActor
from raypex.cluster.hosts.collector_actor import CollectorActor
from raypex.cluster.hosts.evaluator_actor import EvaluatorActor
from raypex.cluster.hosts.learner_actor import CONCURRENCY_GROUPS, LearnerActor
from raypex.cluster.hosts.learner_group import GroupLead
from raypex.cluster.hosts.ray_seams import ChunkSink
from raypex.cluster.plan.topology import plan_run

PLACEMENT_TIMEOUT_S = 15.0
NAMESPACE = "raypex"  # actors are named raypex-<run id>-<role>-<i> in it, so tools can find them
COLLECTOR_MAX_RESTARTS = 3
# Ray restarts a learner whose process died, always: the driver loads the newest checkpoint into it
# and gives up when it died again within a checkpoint window (cluster/driver/revival.py), so a
# long run survives any number of deaths that each leave a checkpoint behind.
LEARNER_MAX_RESTARTS = -1


# What a shipped working directory leaves behind: runs, checkpoints and environments are not code.
SHIPPED_EXCLUDES = ["runs/", ".git/", ".venv/", "venv/", "__pycache__/", "*.pt2", "*.ckpt", "tensorboard/"]


class ExcludesAlreadySaid(logging.Filter):
    """Drops Ray's warning that it now leaves `.venv` and the like out of a shipped working
    directory: raypex leaves them out itself (SHIPPED_EXCLUDES) and its own line says what goes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is now ignored by default when packaging" not in str(record.msg)


def code_runtime_env(code_dir: Path | None) -> dict:
    """The runtime env that gives every actor `code_dir` (a user's env code) as its working
    directory, on every node, Ray uploading it once; empty when there is none."""
    if code_dir is None:
        return {}
    return {"runtime_env": {"working_dir": str(code_dir), "excludes": SHIPPED_EXCLUDES}}


def connect(address: str | None, code_dir: Path | None = None, say: Callable[[str], None] = print) -> bool:
    """Join the cluster at `address`, or start a fresh local one; True when we started it.
    `code_dir`: a user's env code, shipped to every actor (code_runtime_env); `say`: where a line
    about the local cluster's watchdog goes when it did not start.

    `address="local"` always starts a new cluster, so a local Ray instance that is already
    running on this machine (or RAY_ADDRESS in the environment) cannot hijack a local run.
    """
    # Ray warns on every start that the local cluster got a token (each one does), and that a shipped
    # working directory's .venv is left out (SHIPPED_EXCLUDES leaves it out, and raypex's own line says
    # what goes): noise in the progress display (tests/test_soak_probe.py reads Ray's log for both).
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    for packaging in map(logging.getLogger, ("ray._private.worker", "ray._private.runtime_env.working_dir")):
        if not any(isinstance(f, ExcludesAlreadySaid) for f in packaging.filters):  # ray.init packages through
            packaging.addFilter(ExcludesAlreadySaid())  # the first, Ray's own callers through the second
    kwargs = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": True,
              "configure_logging": True, "namespace": NAMESPACE, **code_runtime_env(code_dir)}
    if address is None:
        # Nothing of this cluster outlives the driver, even after kill -9: Ray's agents stay up
        # orphaned otherwise (tests/test_faults.py::test_killing_the_driver_leaves_no_process_of_the_run).
        start_reaper()
        # Ray's worker threads each get a glibc malloc arena; in a long run the learner's grew by
        # ~9 MB a minute with the default number of arenas and ~3 MB with two (`raypex bench --soak`).
        # Every process of a local cluster inherits this (tests/test_soak_probe.py reads it back).
        os.environ.setdefault("MALLOC_ARENA_MAX", "2")
        install_stop_signals()
        try:
            with sigterm_blocked_in_children(), ray_keeps_our_handlers():
                ray.init(address="local", num_cpus=local_cluster_cpus(), **kwargs)
        except Exception as err:  # Ray raises a bare Exception when its start times out
            if RAY_START_TIMED_OUT not in str(err):
                raise
            with contextlib.suppress(Exception):
                ray.shutdown()  # what did start goes now; the reaper takes anything left at exit
            raise ConnectError(local_start_timed_out_line()) from None
        not_watched = confirm_reaper()
        if not_watched is not None:
            say(not_watched)
        return True
    check_gcs_port(address)
    check_gcs_auth(address)
    install_stop_signals()
    try:
        with ray_keeps_our_handlers():
            ray.init(address=address, **kwargs)
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise join_failed(address, err, os.environ.get("RAY_AUTH_MODE", "").lower() == "token") from None
    return False


@contextlib.contextmanager
def ray_keeps_our_handlers():
    """Around ray.init, which replaces raypex's stop handlers twice:
    - first thing, it sets its own SIGTERM handler (`sys.exit(15)`: a SIGTERM during Ray's start,
      taken by any thread of the driver that has it unblocked, ended the command with exit 15 and
      no summary). While it runs, Ray's setter does nothing, so raypex's handler stays and the run
      ends as from any SIGTERM. Without it,
      tests/test_integration.py::test_sigterm_to_the_group_during_rays_start_and_during_training_ends_as_a_stop
      sees exit 15. A Ray without this setter is left as it is; that test says whether it needs more.
    - its core worker puts its own C handler for SIGTERM under Python's (a stack dump, then abort:
      exit -6), which `signal.getsignal` does not see: once Ray is up, raypex's are set again
      (tests/test_soak_probe.py reads the handler the process runs)."""
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    setter = getattr(utils, "set_sigterm_handler", None)
    if setter is not None:
        utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        if setter is not None:
            utils.set_sigterm_handler = setter
    reinstall_stop_signals()


# Ray's words when a local node's raylet has not registered with its GCS within Ray's fixed 30 s
# (seen on a 2-core machine busy with two other training runs, about one start in two): Ray raises a
# bare Exception, which would be a traceback (tests/test_address.py, the one line it becomes).
RAY_START_TIMED_OUT = "timed out during startup"


def local_start_timed_out_line() -> str:
    """The one line for a local cluster Ray gave up starting: what the machine's load was."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    busy = f" (load average {load:.1f} on {local_cluster_cpus()} cores)" if load is not None else ""
    return (f"Ray's local cluster did not start: its raylet had not registered within Ray's 30 s{busy}; "
            "try again once the machine is less busy, or join a running cluster with --address")


def local_cluster_cpus() -> int:
    """The CPUs a local cluster gets: every core of this machine."""
    return os.cpu_count() or 1


def check_local_cluster_holds(config: RunConfig) -> None:
    """PlacementError, before a local cluster is started, when its CPUs cannot hold the config's
    actors (`raypex train pong` on a laptop is refused in a second, not after Ray's start)."""
    check_cpus_fit_one_node(resource_request(config, "cpu"), local_cluster_cpus())


@contextlib.contextmanager
def sigterm_blocked_in_children():
    """Start processes with SIGTERM blocked, as Ray itself starts them with SIGINT blocked.

    `timeout`, `kill -TERM -PGID`, SLURM and systemd (KillMode=control-group) send SIGTERM to every
    process of the run, not only to the driver. A raylet that takes it exits and takes every
    actor with it, so the driver's clean stop (final checkpoint, replay, policy) finds its learner
    dead. The signal mask is inherited across fork and exec, so Ray's GCS, raylet and agents, and
    the workers the raylet forks, keep SIGTERM pending instead; the driver alone handles it and
    shuts them down itself (ray.shutdown, with SIGKILL after a grace period). The driver's own
    mask is restored on the way out. Without it the raylet dies with the group's SIGTERM
    (tests/test_integration.py::test_sigterm_to_the_group_during_rays_start_and_during_training_ends_as_a_stop).
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def disconnect() -> None:
    """Leave a joined cluster: this run's job ends (Ray removes its actors and placement groups),
    the cluster stays up, and a Python caller's next run in this process can connect again."""
    ray.shutdown()


def shutdown() -> None:
    """ray.shutdown() of the local cluster `connect(None)` started, without Ray's graceful wait.

    Ray stops the processes it started with SIGTERM and gives each a second before SIGKILL; with
    SIGTERM blocked in them (`sigterm_blocked_in_children`) every one would take that second. By
    now the run's outputs are written and nothing of the cluster has work left, so they are
    killed at once, which is what the graceful path ends in anyway (0.3 s against 5.3 s here).
    The raylet's agents, which the graceful path let the raylet stop, are killed with the rest
    of the cluster's processes (found by the watchdog's token). If this Ray keeps its node
    elsewhere, the plain (slower) shutdown runs. What it saves is time, so a benchmark shows it,
    not a test: `python -m benchmarks.shutdown`.
    """
    token = os.environ.get(TOKEN_VARIABLE)
    processes = cluster_processes(cluster_variable(token)) if token else {}
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    node = getattr(worker, "_global_node", None)
    kill_all = getattr(node, "kill_all_processes", None)
    if kill_all is not None:
        node.kill_all_processes = functools.partial(_kill_without_grace, kill_all)
    ray.shutdown()
    reap(processes)


def _kill_without_grace(kill_all: Callable, check_alive: bool = True, allow_graceful: bool = False,
                        wait: bool = False) -> None:
    kill_all(check_alive=check_alive, allow_graceful=False, wait=wait)


def cluster_gpus() -> float:
    """GPUs across the alive nodes of the connected cluster."""
    return sum(n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n.get("Alive"))


def node_resources() -> list[dict[str, float]]:
    """The total resources of each alive node of the connected cluster."""
    return [resources for _, resources in alive_nodes()]


def resource_request(config: RunConfig, learner_device: str) -> ResourceRequest:
    """What the config asks Ray for, with the learner on `learner_device` and the collectors acting
    where config.collectors.act_device says (resolved by cluster/ray_runtime/devices.py)."""
    learner_gpus, collector_gpus, server_gpus = gpu_requests(config, learner_device, config.collectors.act_device)
    return ResourceRequest(
        num_collectors=0 if config.collectors.elastic else config.collectors.num,  # elastic ones: placed by node
        collector_cpus=config.collectors.num_cpus,
        learner_cpus=config.learner.num_cpus,
        learner_gpus=learner_gpus,
        collector_gpus=collector_gpus,
        num_learners=config.learner.num,
        server_gpus=server_gpus,
    )


def reserve_resources(config: RunConfig, learner_device: str) -> Reservation:
    """The placement groups for this config (PlacementError if the cluster cannot hold them)."""
    return reserve(resource_request(config, learner_device), PLACEMENT_TIMEOUT_S)


@dataclass
class RunActors:
    """Handles of everything a run started."""

    run_id: str
    collectors: list
    learner: object  # the first learner: with several, it answers for the group (cluster/hosts/learner_group.py)
    evaluator: object
    pair_strategy: str | None = None  # how collector-learner pairs were placed (placement.json)
    members: list = field(default_factory=list)  # the other learners of a group, by rank from 1
    teams: list = field(default_factory=list)  # the collectors whose shards each learner holds, by rank
    servers: list = field(default_factory=list)  # collectors.acting served: one acting server per node
    launcher: CollectorLauncher | None = None  # starts a collector (collectors.num auto: as nodes join)
    # collectors.num auto: where each collector ran, from when to when, and how it left (placement.json,
    # written by the run loop as the count changes)
    collector_history: list = field(default_factory=list)

    def all(self) -> list:
        """Every actor handle (a slot without a collector has none)."""
        return [c for c in self.collectors if c is not None] + [self.learner, *self.members, self.evaluator,
                                                                 *self.servers]

    def kill_all(self) -> None:
        """End every actor of the run for good (Ray restarts none of them)."""
        for actor in self.all():
            ray.kill(actor, no_restart=True)

    def role_of(self, actor_id: str | None) -> str:
        """What the actor with this hex id is in the run ("collector 1", "the learner", ...)."""
        roles = {self.learner._actor_id.hex(): "the learner", self.evaluator._actor_id.hex(): "the evaluator"}
        roles.update({c._actor_id.hex(): f"collector {i}" for i, c in enumerate(self.collectors) if c is not None})
        roles.update({m._actor_id.hex(): f"learner {rank}" for rank, m in enumerate(self.members, start=1)})
        roles.update({s._actor_id.hex(): f"acting server {k}" for k, s in enumerate(self.servers)})
        return roles.get(actor_id or "", "an actor of the run")

    def placement(self) -> dict:
        """Which node each actor runs on (written to RUN_DIR/placement.json); the replay is on the
        learner's node, in its process."""
        present = [(i, c) for i, c in enumerate(self.collectors) if c is not None]
        collector_nodes = ray.get([c.node_id.remote() for _, c in present])
        return {
            "ray_address": ray.get_runtime_context().gcs_address,
            "namespace": NAMESPACE,
            "run_id": self.run_id,
            **self.learner_placement(),
            "collectors": [{"collector": i, "collector_node": node} for (i, _), node in zip(present, collector_nodes)],
            "pair_strategy": self.pair_strategy,
        }

    def learner_placement(self) -> dict:
        """placement.json's learner fields, asked again once Ray restarted the learner (on another
        node when its own was lost); the collectors' entries stay as they were. With several
        learners, `learners` says where each is and whose shards it holds."""
        nodes = ray.get([learner.node_id.remote() for learner in (self.learner, *self.members)])
        fields = {"learner_node": nodes[0], "replay_node": nodes[0], "node_ips": node_addresses()}
        if self.members:
            fields["learners"] = [{"learner": rank, "learner_node": node, "replay_node": node, "collectors": team}
                                  for rank, (node, team) in enumerate(zip(nodes, self.teams))]
        return fields


def learner_name(run_id: str, rank: int = 0) -> str:
    """Learner `rank`'s actor name in the raypex namespace (collectors find their replay by it)."""
    return f"raypex-{run_id}-learner" + (f"-{rank}" if rank else "")


def acting_server_name(run_id: str, index: int) -> str:
    """Acting server `index`'s actor name (its node's collectors call it by name)."""
    return f"raypex-{run_id}-acting-{index}"


def start_acting_servers(group: Reservation, run_id: str, settings: list[CollectorSettings],
                         gpus: float) -> tuple[list, list[str]]:
    """One acting server per node that holds collectors, taking none of their CPU (it runs the
    forwards the collectors would have run): in the bundle of the node's first collector, or with
    `gpus` (act_device cuda) pinned to the node with that share of its GPU, which the collectors'
    bundles do not hold. Ray restarts one that dies, and its collectors wait for it. Returns the
    servers and the name of each collector's. `settings`: each collector's (a GPU server builds
    the network from its node's first)."""
    servers, name_of_node = [], {}
    nodes = group.collector_nodes()
    for index, node in enumerate(nodes):
        if node not in name_of_node:
            name_of_node[node] = name = acting_server_name(run_id, len(servers))
            if gpus:
                options = {"num_gpus": gpus, "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}
            else:
                options = {"scheduling_strategy": group.collector_place(index)}
            servers.append(ray.remote(ActingServerActor).options(num_cpus=0, max_restarts=-1, name=name, **options)
                           .remote(socket_address(name), settings[index], "cuda" if gpus else "cpu"))
    return servers, [name_of_node[node] for node in nodes]


@dataclass(frozen=True)
class CollectorLauncher:
    """Starts collector i of a run where it is told (a bundle of the reservation, or with
    collectors.num auto a node that joined: cluster/ray_runtime/elastic.py)."""

    run_id: str
    plans: list  # CollectorPlan per collector (slot)
    num_cpus: float
    num_gpus: float
    come_back_s: float
    server_names: list  # each collector's node's acting server (None: it acts on its own)

    def start(self, i: int, scheduling_strategy):
        plan = self.plans[i]
        # collector i -> its shard in its learner (chunks): the sink goes with the constructor's
        # arguments, which Ray passes again to a restarted collector, so the new process writes to
        # the same shard.
        sink = ChunkSink(learner_name(self.run_id, plan.learner), plan.shard, plan.max_pushes_in_flight)
        return ray.remote(CollectorActor).options(
            num_cpus=self.num_cpus, num_gpus=self.num_gpus, scheduling_strategy=scheduling_strategy,
            max_concurrency=4, max_restarts=COLLECTOR_MAX_RESTARTS, name=collector_name(self.run_id, i),
        ).remote(plan.settings, sink, self.server_names[i], self.come_back_s)


def collector_name(run_id: str, index: int) -> str:
    """Collector `index`'s actor name in the raypex namespace (the learner publishes to it by name)."""
    return f"raypex-{run_id}-collector-{index}"


def start_actors(config: RunConfig, spec: EnvSpec, group: Reservation, device: str, run_id: str,
                 learner_host: type = LearnerActor) -> RunActors:
    """Create the collectors, the learner (with the replay) and the evaluator as Ray actors,
    connected as cluster/plan/topology.py plans (they start in parallel). `learner_host` lets
    the bench host the learner in a subclass with its probes."""
    plan = plan_run(config, spec)
    request = resource_request(config, device)
    lp, *member_plans = plan.learners
    names = [collector_name(run_id, c.index) for c in plan.collectors]
    teams = [list(p.collectors) for p in plan.learners]
    # Asked for first: Ray starts a local cluster with one idle worker process per CPU, and the
    # first actors asked for take them. The learner's start (torch, then its first update) is
    # the longer path to training; the collectors act in ONNX Runtime and start quickly in a fresh process.
    # The learner hosts the replay (every shard) and publishes to every collector by name. Its
    # threads: the default one trains; "replay" takes chunks and counter reads; "control" takes
    # request_stop, which must not queue behind either.
    # Several learners: the first answers for the group (GroupLead), the others host their shards.
    learner_options = {"num_cpus": request.learner_cpus, "num_gpus": request.learner_gpus,
                           "max_restarts": LEARNER_MAX_RESTARTS}
    if member_plans:
        member_names = [learner_name(run_id, p.rank) for p in member_plans]
        learner = ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(GroupLead).options(
            scheduling_strategy=group.learner_place(0), name=learner_name(run_id), **learner_options,
        ).remote(lp.settings, device, lp.num_threads, lp.replay, names, member_names, teams)
    else:
        learner = ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(learner_host).options(
            scheduling_strategy=group.learner_place(0), name=learner_name(run_id), **learner_options,
        ).remote(lp.settings, device, lp.num_threads, lp.replay, names, config.collectors.elastic)
    members = [ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(LearnerActor).options(
        scheduling_strategy=group.learner_place(p.rank), name=learner_name(run_id, p.rank), **learner_options,
    ).remote(p.settings, device, p.num_threads, p.replay, []) for p in member_plans]
    served = config.collectors.acting == "served"
    servers, server_names = (start_acting_servers(group, run_id, [c.settings for c in plan.collectors],
                                                  request.server_gpus)
                             if served else ([], [None] * len(names)))
    launcher = CollectorLauncher(run_id, plan.collectors, request.collector_cpus, request.collector_gpus,
                                 config.collectors.come_back_s, server_names)
    collectors = ([None] * len(names) if config.collectors.elastic  # started as nodes join (cluster/ray_runtime/elastic.py)
                  else [launcher.start(i, group.collector_place(i)) for i in range(len(names))])
    # the driver -> the evaluator (published Weights, cluster/driver/evaluation.py). Evaluation shares
    # the learner's node and reservation: it runs while the learner trains, in what CPU time the
    # collectors (throttled to the replay ratio) leave free.
    # Evaluation is optional to training: Ray restarts a dead evaluator, at the cost of one evaluation.
    evaluator = ray.remote(EvaluatorActor).options(
        num_cpus=0, scheduling_strategy=group.learner_place(0), max_restarts=-1,
        name=f"raypex-{run_id}-evaluator",
    ).remote(plan.evaluator)
    return RunActors(run_id, collectors, learner, evaluator, pair_strategy=group.pair_strategy, members=members,
                     teams=teams, servers=servers, launcher=launcher)
