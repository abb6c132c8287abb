"""Same software on every node: raypex, Ray, torch and Python on each node that hosts the run's
actors, against the driver's.

Checked when joining a cluster (`--address`, or a Ray job), with one small task pinned to each node
the placement uses: asked before the actors, read while they start (0.35 s sooner to the first env
step, BENCHMARKS.md (git history)), and before the run directory exists; the bench asks every live node before
its first stage. A node set up differently is then one line naming it and what differs (its
actors killed), instead of actors that fail to unpickle their arguments, or load weights of another
shape, minutes into the run. torch is compared by release (a CPU build and a CUDA build of one
release load each other's weights).
"""

from __future__ import annotations

import importlib.metadata
import platform

import ray
from ray.util.placement_group import placement_group_table
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raypex.cluster.ray_runtime.placement import node_addresses
from raypex.cluster.driver.run_errors import error_line

PROBE_TIMEOUT_S = 60.0


class VersionMismatch(Exception):
    """A node of the run has other software than the driver (one-line message)."""


def software_versions() -> dict[str, str]:
    """raypex, Ray, torch (release) and Python (major.minor) of this process."""
    import raypex
    return {"raypex": raypex.__version__, "ray": ray.__version__, "torch": _release("torch"),
            "python": ".".join(platform.python_version_tuple()[:2])}


def _release(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def differences(driver: dict[str, str], nodes: dict[str, dict[str, str]]) -> list[str]:
    """'node 10.0.0.7 has torch 2.12.0 (the driver has 2.13.0)' for each difference."""
    found = []
    for node, versions in sorted(nodes.items()):
        for name, mine in driver.items():
            theirs = versions.get(name, "unknown")
            if theirs != mine:
                found.append(f"node {node} has {name} {theirs} (the driver has {mine})")
    return found


def ask_node_versions(reservation) -> dict:
    """Send the version probe to every node holding a bundle of `reservation` (placement.Reservation);
    their answers, for `check_node_versions`, come while the run's actors start."""
    node_ids: set[str] = set()
    for group in reservation.placement_groups():
        node_ids |= set(placement_group_table(group)["bundles_to_node_id"].values())
    return _ask(node_ids)


def ask_every_node_versions() -> dict:
    """The version probe sent to every live node of the cluster (the bench, whose stages each
    reserve their own nodes), for `check_node_versions`."""
    return _ask({n["NodeID"] for n in ray.nodes() if n["Alive"]})


def _ask(node_ids: set[str]) -> dict:
    probe = ray.remote(num_cpus=0, max_retries=0)(software_versions)
    return {node_id: probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
            for node_id in node_ids}


def check_node_versions(refs: dict) -> None:
    """VersionMismatch unless every node `ask_node_versions` asked runs the driver's raypex, Ray,
    torch and Python."""
    addresses = node_addresses()
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=PROBE_TIMEOUT_S)
    found: dict[str, dict[str, str]] = {}
    for node_id, ref in refs.items():
        name = addresses.get(node_id, node_id[:12])
        try:
            found[name] = ray.get(ref, timeout=0)
        except ray.exceptions.GetTimeoutError:
            raise VersionMismatch(f"node {name} did not answer a version check within {PROBE_TIMEOUT_S:g}s") from None
        except ray.exceptions.RayError as err:
            reason = error_line(err)
            raise VersionMismatch(f"node {name} cannot run raypex ({reason}); install raypex there") from None
    diffs = differences(software_versions(), found)
    if diffs:
        raise VersionMismatch("; ".join(diffs) + "; install the same versions on every node")
