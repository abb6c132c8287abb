"""Where actors go: a placement group for the learner and one for the collector+shard pairs.

A collector and its shard share a bundle, so they always share a node. Pair bundles are spread
over the nodes: STRICT_SPREAD (one pair per node) when enough nodes can each hold a pair, else
SPREAD (as even as Ray can). Before asking Ray, the request is checked against the cluster's nodes
so an impossible one fails in seconds with a sentence naming what is missing, instead of waiting
forever in Ray's pending state.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


class PlacementError(Exception):
    """The cluster cannot hold the requested actors (one-line message)."""


@dataclass(frozen=True)
class ResourceRequest:
    """CPUs and GPUs each actor kind asks for."""

    num_collectors: int
    collector_cpus: float
    shard_cpus: float
    learner_cpus: float
    learner_gpus: int

    def bundles(self) -> list[dict[str, float]]:
        """Bundle 0 for the learner, bundle i+1 for collector i and its shard."""
        learner = {"CPU": self.learner_cpus}
        if self.learner_gpus:
            learner["GPU"] = float(self.learner_gpus)
        pair = {"CPU": self.collector_cpus + self.shard_cpus}
        return [learner] + [dict(pair) for _ in range(self.num_collectors)]


def check_fits(request: ResourceRequest, nodes: list[dict[str, float]]) -> None:
    """Raise PlacementError if the alive nodes (their total resources) cannot hold the bundles."""
    total_cpu = sum(n.get("CPU", 0.0) for n in nodes)
    total_gpu = sum(n.get("GPU", 0.0) for n in nodes)
    bundles = request.bundles()
    need_cpu = sum(b["CPU"] for b in bundles)
    if request.learner_gpus > total_gpu:
        raise PlacementError(
            f"the learner asks for {request.learner_gpus} GPU but the Ray cluster has {total_gpu:g}; "
            "set learner.device=cpu or add a GPU node"
        )
    if need_cpu > total_cpu + 1e-9:
        raise PlacementError(
            f"the run needs {need_cpu:g} CPUs (learner {request.learner_cpus:g} + "
            f"{request.num_collectors} x (collector {request.collector_cpus:g} + shard {request.shard_cpus:g})) "
            f"but the Ray cluster has {total_cpu:g}; lower collectors.num or collectors.num_cpus"
        )
    largest = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
    for name, bundle in (("learner", bundles[0]), ("collector+shard", bundles[-1])):
        if bundle["CPU"] > largest + 1e-9:
            raise PlacementError(
                f"one {name} needs {bundle['CPU']:g} CPUs on a single node but the largest node has {largest:g}"
            )


def alive_node_resources() -> list[dict[str, float]]:
    """Total resources of each alive node of the connected cluster."""
    return [n["Resources"] for n in ray.nodes() if n.get("Alive")]


def pair_strategy(request: ResourceRequest, nodes: list[dict[str, float]]) -> str:
    """STRICT_SPREAD when every pair can have a node of its own, else SPREAD."""
    pair_cpus = request.collector_cpus + request.shard_cpus
    roomy = sum(1 for n in nodes if n.get("CPU", 0.0) + 1e-9 >= pair_cpus)
    return "STRICT_SPREAD" if 1 < request.num_collectors <= roomy else "SPREAD"


@dataclass(frozen=True)
class Reservation:
    """The placement groups of one run: the learner's and the collector+shard pairs'."""

    learner: object
    pairs: object

    def release(self) -> None:
        """Give both placement groups back to the cluster."""
        for group in (self.learner, self.pairs):
            remove_placement_group(group)


def reserve(request: ResourceRequest, timeout_s: float) -> Reservation:
    """Check, then create both placement groups; PlacementError if Ray cannot place them in time."""
    nodes = alive_node_resources()
    check_fits(request, nodes)
    bundles = request.bundles()
    learner = placement_group(bundles[:1], strategy="PACK")
    pairs = placement_group(bundles[1:], strategy=pair_strategy(request, nodes))
    ready, _ = ray.wait([learner.ready(), pairs.ready()], num_returns=2, timeout=timeout_s)
    reservation = Reservation(learner, pairs)
    if len(ready) < 2:
        reservation.release()
        free = ray.available_resources()
        raise PlacementError(
            f"Ray could not place the actors within {timeout_s:g}s (needs {bundles}; "
            f"free now: {free.get('CPU', 0):g} CPU, {free.get('GPU', 0):g} GPU; other jobs may hold them)"
        )
    return reservation


def in_bundle(group, index: int) -> PlacementGroupSchedulingStrategy:
    """The scheduling strategy that pins an actor to bundle `index` of `group`."""
    return PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=index)
