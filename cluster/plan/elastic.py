"""Collectors that follow the cluster (collectors.num auto): which slot runs on which node.

A run with collectors.num auto has `collectors.max` slots, each a shard of the replay with room
for replay.capacity transitions, so the replay never holds more than capacity x max however
many collectors come and go. A collector that joins takes the lowest free slot: its shard keeps
what earlier collectors stored there (it is sampled all along) and the new collector writes on
from their count, overwriting the oldest rows first. The alternative, one budget shared by the
shards present, would resize every shard on each join and leave, copying the learner's replay
while it trains; slots never copy, at the cost of shards that fill more slowly while fewer
collectors than max run.

Pure logic (no Ray): the Ray runtime reads the nodes (cluster/ray_runtime/elastic.py) and
starts, stops and settles the collectors this decides.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

_EPS = 1e-9


@dataclass(frozen=True)
class Node:
    """One alive node of the cluster, as the slots see it."""

    node_id: str
    cpus: float  # its total CPUs
    reserved: float = 0.0  # CPUs the run holds there besides its collectors (the learner's)
    draining: bool = False  # told to go (a drain with a deadline): it gets none, and its collectors leave


@dataclass(frozen=True)
class Changes:
    """What to do now: start collectors in `start` (slot, node id), stop those in `drain` (their
    node is draining) and settle those in `lost` (their node is gone)."""

    start: list[tuple[int, str]] = field(default_factory=list)
    drain: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)


class CollectorSlots:
    """`slots` collector slots over the cluster's nodes, `per_node` on each node with CPUs for them."""

    def __init__(self, slots: int, per_node: int, collector_cpus: float):
        self.per_node, self.collector_cpus = per_node, collector_cpus
        self.node_of: list[str | None] = [None] * slots  # the node each slot's collector runs on
        self.leaving: set[int] = set()  # slots whose collector was told to stop (its node drains)

    @property
    def taken(self) -> list[int]:
        """The slots that have a collector (leaving ones included)."""
        return [slot for slot, node in enumerate(self.node_of) if node is not None]

    def wanted_on(self, node: Node) -> int:
        """How many collectors `node` holds: per_node, fewer where its CPUs (less what the run
        holds there already) do not hold as many; none on a draining node."""
        if node.draining:
            return 0
        room = max(0.0, node.cpus - node.reserved)
        return min(self.per_node, int((room + _EPS) // self.collector_cpus))

    def changes(self, nodes: list[Node]) -> Changes:
        """What the cluster's alive `nodes` call for (each slot's node is one of them, or gone)."""
        by_id = {node.node_id: node for node in nodes}
        lost = [slot for slot, node in enumerate(self.node_of) if node is not None and node not in by_id]
        drain = [slot for slot, node in enumerate(self.node_of)
                 if node in by_id and by_id[node].draining and slot not in self.leaving]
        free = [slot for slot, node in enumerate(self.node_of) if node is None]
        start = []
        for node in nodes:
            present = sum(1 for slot, on in enumerate(self.node_of) if on == node.node_id and slot not in self.leaving)
            for _ in range(self.wanted_on(node) - present):
                if not free:
                    return Changes(start, drain, lost)
                start.append((free.pop(0), node.node_id))
        return Changes(start, drain, lost)

    def took(self, slot: int, node_id: str) -> None:
        """A collector was started in `slot` on `node_id`."""
        self.node_of[slot] = node_id

    def leave(self, slot: int) -> None:
        """`slot`'s collector was told to stop (its node drains); the slot is free once it has."""
        self.leaving.add(slot)

    def free(self, slot: int) -> None:
        """`slot`'s collector is gone: the slot takes the next one that joins."""
        self.node_of[slot] = None
        self.leaving.discard(slot)


def spread_order(slots: int) -> list[int]:
    """Each slot's place in the spread of exploration rates (Ape-X's 0 .. slots - 1): the two ends
    first, then the middles of the widest gaps, so the collectors of the lowest slots, which are
    taken first, span from the most exploring to the greediest whatever their number
    (4 slots: 0, 3, 1, 2)."""
    order = [0, slots - 1][:slots]
    gaps = deque([(0, slots - 1)])
    while gaps:
        low, high = gaps.popleft()
        middle = (low + high) // 2
        if low < middle < high:
            order.append(middle)
            gaps.extend([(low, middle), (middle, high)])
    return order

