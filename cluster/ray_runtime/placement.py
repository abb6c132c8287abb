"""Where actors go: a placement group for the learner (which hosts the replay) and one for the
collectors, a bundle each (called pairs below, from when each collector had a shard beside it).

The learner is placed first; the collector bundles are then spread over the nodes with the learner's share taken off its
node: STRICT_SPREAD (one pair per node) when enough nodes can each still hold a pair, else SPREAD
(as even as Ray can) over the nodes with room, or PACK when only one has room; a STRICT_SPREAD
that Ray cannot grant falls back to PACK. Before asking Ray, the request is checked against the
cluster's nodes (every layout of the learner and the pairs is tried, pure logic below) so an
impossible one fails in seconds with a sentence naming what is missing, instead of waiting
forever in Ray's pending state.

Several learners (learner.num) are placed as teams: one placement group per learner and its
collectors, packed onto one node where one holds them, so a collector's chunks reach its
learner's shards without leaving the node.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raypex.cluster.driver.run_errors import PlacementError
from raypex.cluster.plan.topology import team_collectors


@dataclass(frozen=True)
class ResourceRequest:
    """CPUs and GPUs each actor kind asks for (GPU shares are fractions of one GPU)."""

    num_collectors: int
    collector_cpus: float
    learner_cpus: float
    learner_gpus: float
    collector_gpus: float = 0.0  # > 0 when collectors act on a GPU (collectors.act_device)
    num_learners: int = 1  # learner.num: each asks for learner_cpus and learner_gpus
    server_gpus: float = 0.0  # > 0 when each node's acting server acts on its GPU (outside the bundles)

    def bundles(self) -> list[dict[str, float]]:
        """A learner's bundle, then one per collector (collector i's is i + 1)."""
        learner = {"CPU": self.learner_cpus}
        if self.learner_gpus:
            learner["GPU"] = float(self.learner_gpus)
        pair = {"CPU": self.collector_cpus}
        if self.collector_gpus:
            pair["GPU"] = float(self.collector_gpus)
        return [learner] + [dict(pair) for _ in range(self.num_collectors)]


_EPS = 1e-9


def _node_text(nodes: list[dict[str, float]]) -> str:
    """'2 x 1 CPU, 1 x 4 CPU + 1 GPU': the node shapes, for messages."""
    shapes: dict[str, int] = {}
    for node in nodes:
        shape = f"{node.get('CPU', 0.0):g} CPU" + (f" + {node['GPU']:g} GPU" if node.get("GPU") else "")
        shapes[shape] = shapes.get(shape, 0) + 1
    return ", ".join(f"{count} x {shape}" for shape, count in shapes.items())


def _fits(free: float, each: float) -> int:
    return int((free + _EPS) // each) if each > 0 else 1 << 30


def pair_slots(request: ResourceRequest, room: list[dict[str, float]]) -> list[int]:
    """How many collectors each node's free CPUs (and GPU shares, when they act on a GPU) hold."""
    return [min(_fits(r.get("CPU", 0.0), request.collector_cpus), _fits(r.get("GPU", 0.0), request.collector_gpus))
            for r in room]


def room_beside_learner(request: ResourceRequest, nodes: list[dict[str, float]],
                        learner_node: int) -> list[dict[str, float]]:
    """Each node's CPUs and GPUs once the learner's bundle sits on node `learner_node`."""
    room = []
    for i, node in enumerate(nodes):
        here = i == learner_node
        room.append({"CPU": node.get("CPU", 0.0) - (request.learner_cpus if here else 0.0),
                     "GPU": node.get("GPU", 0.0) - (request.learner_gpus if here else 0.0)})
    return room


def _holds_learner(request: ResourceRequest, node: dict[str, float]) -> bool:
    return node.get("CPU", 0.0) + _EPS >= request.learner_cpus and node.get("GPU", 0.0) + _EPS >= request.learner_gpus


def best_learner_node(request: ResourceRequest, nodes: list[dict[str, float]]) -> int | None:
    """The node for the learner after which the most pairs get a node of their own (then the
    most pair slots); None when no node that can hold the learner leaves room for every pair."""
    best, best_key = None, None
    for i, node in enumerate(nodes):
        if not _holds_learner(request, node):
            continue
        slots = pair_slots(request, room_beside_learner(request, nodes, i))
        if sum(slots) < request.num_collectors:
            continue
        key = (sum(1 for s in slots if s > 0), sum(slots))
        if best_key is None or key > best_key:
            best, best_key = i, key
    return best


def check_fits(request: ResourceRequest, nodes: list[dict[str, float]]) -> None:
    """Raise PlacementError, naming what is missing, unless some layout of the bundles on the
    alive nodes (their total resources) exists: the learner on one node, every pair on a node
    with room left for it."""
    total_cpu = sum(n.get("CPU", 0.0) for n in nodes)
    total_gpu = sum(n.get("GPU", 0.0) for n in nodes)
    bundles = request.bundles()
    learners = request.num_learners
    need_cpu = sum(b["CPU"] for b in bundles) + (learners - 1) * request.learner_cpus
    if learners * request.learner_gpus > total_gpu + _EPS:
        who = "the learner asks" if learners == 1 else f"{learners} learners ask"
        raise PlacementError(
            f"{who} for {learners * request.learner_gpus:g} GPU but the Ray cluster has {total_gpu:g}; "
            "set learner.device=cpu or add a GPU node"
        )
    largest_gpu = max((n.get("GPU", 0.0) for n in nodes), default=0.0)
    if request.server_gpus and request.learner_gpus + request.server_gpus > largest_gpu + _EPS:
        raise PlacementError(
            f"the learner's {request.learner_gpus:g} GPU and the acting server of its node's collectors "
            f"({request.server_gpus:g} GPU) do not fit on one node's {largest_gpu:g} GPU; lower collectors.num_gpus"
        )
    need_gpu = learners * request.learner_gpus + request.num_collectors * request.collector_gpus
    if request.collector_gpus and need_gpu > total_gpu + _EPS:
        raise PlacementError(
            f"the run needs {need_gpu:g} GPUs ({_learners_text(learners)} {request.learner_gpus:g} + {request.num_collectors} x "
            f"collector {request.collector_gpus:g}) but the Ray cluster has {total_gpu:g}; lower collectors.num_gpus "
            "or set collectors.act_device=cpu"
        )
    if need_cpu > total_cpu + 1e-9:
        raise PlacementError(
            f"the run needs {need_cpu:g} CPUs ({_learners_text(learners)} {request.learner_cpus:g} + "
            f"{request.num_collectors} x collector {request.collector_cpus:g}) "
            f"but the Ray cluster has {total_cpu:g}; lower collectors.num or collectors.num_cpus"
        )
    largest = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
    for name, bundle in (("learner", bundles[0]), ("collector", bundles[-1])):
        if bundle["CPU"] > largest + 1e-9:
            raise PlacementError(
                f"one {name} needs {bundle['CPU']:g} CPUs on a single node but the largest node has {largest:g}"
            )
    if learners == 1 and best_learner_node(request, nodes) is None:
        pair = f"{request.collector_cpus:g} CPUs" + (f" + {request.collector_gpus:g} GPU" if request.collector_gpus
                                                     else "")
        most = max((sum(pair_slots(request, room_beside_learner(request, nodes, i)))
                    for i, n in enumerate(nodes) if _holds_learner(request, n)), default=0)
        raise PlacementError(
            f"{request.num_collectors} collectors of {pair} do not fit beside the learner "
            f"on nodes of {_node_text(nodes)}: at most {most} do; lower collectors.num or collectors.num_cpus, "
            "or add nodes"
        )


def _learners_text(learners: int) -> str:
    return "learner" if learners == 1 else f"{learners} x learner"


def check_cpus_fit_one_node(request: ResourceRequest, cpus: float) -> None:
    """check_fits' CPU half for a local cluster about to start with `cpus` CPUs: a run this machine
    cannot hold is refused before Ray starts (seconds sooner); its GPUs, which only Ray detects,
    are checked once it has."""
    check_fits(dataclasses.replace(request, learner_gpus=0.0, collector_gpus=0.0), [{"CPU": float(cpus)}])


def alive_nodes() -> list[tuple[str, dict[str, float]]]:
    """(node id, total resources) of each alive node of the connected cluster."""
    return [(n["NodeID"], n["Resources"]) for n in ray.nodes() if n.get("Alive")]


def node_addresses() -> dict[str, str]:
    """node id -> IP address of every node the connected cluster knows."""
    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}


def pair_strategy(request: ResourceRequest, room: list[dict[str, float]]) -> str:
    """How to lay out the pairs on nodes with `room` free beside the learner: STRICT_SPREAD when
    every pair can have a node of its own, SPREAD when at least two nodes have room, else PACK."""
    roomy = sum(1 for slots in pair_slots(request, room) if slots > 0)
    if 1 < request.num_collectors <= roomy:
        return "STRICT_SPREAD"
    return "SPREAD" if roomy > 1 else "PACK"


@dataclass(frozen=True)
class Reservation:
    """Where a run's actors go: the (placement group, bundle) of each learner (the evaluator shares
    the first's) and of each collector. A run's own has one group for one learner and one for the
    collectors, or one group per learner and its collectors; a Tune trial's is the one group Tune
    reserved (cluster/sweep/trial.py), which Tune gives back."""

    learners: tuple  # (placement group, bundle index) per learner rank
    collectors: tuple  # (placement group, bundle index) per collector
    pair_strategy: str = "SPREAD"  # how the collectors were laid out
    owned: bool = True  # reserved by the run, which releases it

    def learner_place(self, rank: int = 0) -> PlacementGroupSchedulingStrategy:
        """Where learner `rank` runs (the evaluator beside the first)."""
        return in_bundle(*self.learners[rank])

    def collector_place(self, index: int) -> PlacementGroupSchedulingStrategy:
        """Where collector `index` runs."""
        return in_bundle(*self.collectors[index])

    def learner_node(self) -> str:
        """The node id of the (first) learner's bundle."""
        group, index = self.learners[0]
        return placement_group_table(group)["bundles_to_node_id"][index]

    def collector_nodes(self) -> list[str]:
        """The node id of each collector's bundle (the reservation's groups are placed)."""
        tables = {}  # one read of each group's table from the GCS, not one per collector
        for group, _ in self.collectors:
            if group.id not in tables:
                tables[group.id] = placement_group_table(group)["bundles_to_node_id"]
        return [tables[group.id][index] for group, index in self.collectors]

    def placement_groups(self) -> list:
        """Every placement group of the reservation, once each."""
        groups = []
        for group, _ in (*self.learners, *self.collectors):
            if not any(group is seen for seen in groups):
                groups.append(group)
        return groups

    def release(self) -> None:
        """Give the placement groups back to the cluster (unless they are someone else's)."""
        if self.owned:
            for group in self.placement_groups():
                remove_placement_group(group)


def reserve(request: ResourceRequest, timeout_s: float) -> Reservation:
    """Check, place the learner, then the pairs around it; PlacementError if Ray cannot place
    them in time. The pairs' strategy counts the learner where Ray put it; when STRICT_SPREAD
    cannot be had (other jobs may hold some nodes' CPUs), PACK, which takes any fit, is tried.
    Several learners are placed as teams instead (`reserve_teams`)."""
    nodes = alive_nodes()
    resources = [r for _, r in nodes]
    check_fits(request, resources)
    if request.num_learners > 1:
        return reserve_teams(request, timeout_s)
    bundles = request.bundles()
    deadline = time.monotonic() + timeout_s
    learner = placement_group(bundles[:1], strategy="PACK")
    if not ray.wait([learner.ready()], timeout=timeout_s)[0]:
        remove_placement_group(learner)
        raise _not_placed(bundles, timeout_s)
    learner_node = placement_group_table(learner)["bundles_to_node_id"][0]
    if request.num_collectors == 0:  # collectors.num auto: they are placed node by node as the run goes
        return Reservation(((learner, 0),), (), "BY_NODE")
    index = next((i for i, (node_id, _) in enumerate(nodes) if node_id == learner_node), -1)
    strategy = pair_strategy(request, room_beside_learner(request, resources, index))
    attempts = [strategy, "PACK"] if strategy == "STRICT_SPREAD" else [strategy]
    for attempt, strategy in enumerate(attempts):
        left = deadline - time.monotonic()
        wait_s = left / 2 if attempt < len(attempts) - 1 else left
        pairs = placement_group(bundles[1:], strategy=strategy)
        if ray.wait([pairs.ready()], timeout=max(wait_s, 0.5))[0]:
            return Reservation(((learner, 0),), tuple((pairs, i) for i in range(request.num_collectors)), strategy)
        remove_placement_group(pairs)
    remove_placement_group(learner)
    raise _not_placed(bundles, timeout_s)


def reserve_teams(request: ResourceRequest, timeout_s: float) -> Reservation:
    """One placement group per learner and its collectors, each packed onto one node where one
    holds them (the chunks then never leave the node), spread over nodes as Ray finds room."""
    bundles = request.bundles()
    learner_bundle, pair = bundles[0], bundles[-1]
    groups, learners, collectors = [], [], []
    for team in team_collectors(request.num_collectors, request.num_learners):
        group = placement_group([learner_bundle] + [dict(pair) for _ in team], strategy="PACK")
        groups.append(group)
        learners.append((group, 0))
        collectors += [(group, 1 + k) for k in range(len(team))]
    ready = ray.wait([g.ready() for g in groups], num_returns=len(groups), timeout=timeout_s)[0]
    if len(ready) < len(groups):
        for group in groups:
            remove_placement_group(group)
        raise _not_placed(bundles, timeout_s)
    return Reservation(tuple(learners), tuple(collectors), "PACK")


def _not_placed(bundles: list[dict], timeout_s: float) -> PlacementError:
    free = ray.available_resources()
    return PlacementError(
        f"Ray could not place the actors within {timeout_s:g}s (needs {bundles}; "
        f"free now: {free.get('CPU', 0):g} CPU, {free.get('GPU', 0):g} GPU; other jobs may hold them)"
    )


def in_bundle(group, index: int) -> PlacementGroupSchedulingStrategy:
    """The scheduling strategy that pins an actor to bundle `index` of `group`."""
    return PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=index)
