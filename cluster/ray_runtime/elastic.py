"""ElasticSupervisor: collectors that follow the cluster (collectors.num auto).

Each poll it reads the cluster's alive nodes and those being drained (Ray's node drain with a
deadline, the way a preemptible VM is warned), and CollectorSlots (cluster/plan/elastic.py) says
what to do:
- a node with room gets collectors, each pinned to it in a free slot (a shard of its own beside
  the learner), told the newest weights and started;
- a draining node's collectors are told to stop: each ends its chunk, waits until every chunk
  it sent is stored, and returns; then its actor goes and its slot is free. Nothing is lost;
- a collector whose node left without notice (or that died for good) is settled: its shard is
  told what the collector had counted (the driver's newest report of it), and what the shard
  does not hold of that counts as lost. Its slot is free once the shard has it, so the next
  collector there counts on from that count.

The rest (a loop that raised, a process Ray restarts on its node) is CollectorSupervisor's.
Above the cluster's size, Ray's autoscaler is asked for room for the learner and every slot
(ray.autoscaler.sdk.request_resources), per_node collectors to a bundle; a cluster without one
ignores the request.
"""

from __future__ import annotations

import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raypex.cluster.plan.elastic import CollectorSlots, Node
from raypex.cluster.ray_runtime.supervisor import CollectorSupervisor

FOLLOW_EVERY_S = 1.0  # how often the cluster's nodes are read


def draining_nodes() -> dict[str, int]:
    """Node id -> drain deadline (ms since the epoch; 0: none) of each node being drained. Ray
    says it only through its private state API (2.x); a Ray without it reports none."""
    state = getattr(getattr(getattr(ray, "_private", None), "state", None), "state", None)
    reader = getattr(state, "get_draining_nodes", None)
    return dict(reader()) if reader is not None else {}


def request_room(bundles: list[dict[str, float]]) -> None:
    """Ask Ray's autoscaler for room for `bundles` (none: withdraw the request)."""
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles)


class ElasticSupervisor(CollectorSupervisor):
    """CollectorSupervisor for collectors.num auto: it also starts and ends collectors as nodes
    join, drain and leave (see the module docstring)."""

    def __init__(self, actors, max_restarts: int, progress, come_back_s: float, per_node: int,
                 learner_cpus: float, learner_node: str, reported_env_steps, clock_start: float):
        """`reported_env_steps(i)`: the env steps collector i last reported to the driver;
        `learner_node`: the node whose CPUs the learner holds `learner_cpus` of."""
        super().__init__(actors.collectors, actors.learner, max_restarts, progress, come_back_s)
        self.actors, self.launcher = actors, actors.launcher
        self.slots = CollectorSlots(len(actors.collectors), per_node, self.launcher.num_cpus)
        self.learner_cpus, self.learner_node = learner_cpus, learner_node
        self.reported_env_steps, self.clock_start = reported_env_steps, clock_start
        self.settling: dict[int, object] = {}  # slot -> the shard's pending writer_left call
        self.history: dict[int, dict] = {}  # slot -> its current collector's entry in actors.collector_history
        self.next_follow = 0.0
        self.addresses: dict[str, str] = {}  # node id -> IP, for the lines said

    def start(self) -> None:
        """Collectors on every node with room now; room for the rest asked of the autoscaler, in
        node-sized bundles (per_node collectors each), so that it packs them as the slots place them."""
        per_node = self.slots.per_node
        nodes = -(-len(self.collectors) // per_node)
        request_room([{"CPU": self.learner_cpus}] + [{"CPU": per_node * self.launcher.num_cpus}] * nodes)
        self.follow(force=True)

    def check(self) -> None:
        if self.stopping:
            return
        self.follow()
        super().check()

    def follow(self, force: bool = False) -> None:
        """Start, stop and settle collectors as the cluster's nodes say (at most every FOLLOW_EVERY_S)."""
        now = time.monotonic()
        if not force and now < self.next_follow:
            return
        self.next_follow = now + FOLLOW_EVERY_S
        self._free_settled()
        alive = [n for n in ray.nodes() if n.get("Alive")]
        self.addresses.update({n["NodeID"]: n["NodeManagerAddress"] for n in alive})
        draining = draining_nodes()
        nodes = [Node(n["NodeID"], n["Resources"].get("CPU", 0.0),
                      self.learner_cpus if n["NodeID"] == self.learner_node else 0.0, n["NodeID"] in draining)
                 for n in alive]
        changes = self.slots.changes(nodes)
        for slot in changes.lost:
            if slot not in self.settling:
                self._settle(slot, "its node left the cluster")
        for slot in changes.drain:
            self.slots.leave(slot)
            self.collectors[slot].stop.remote()
            self.progress.message(f"collector {slot}: its node {self._where(slot)} is draining; it stops once its last "
                                  "chunks are stored")
        joined: dict[str, list[int]] = {}
        for slot, node in changes.start:
            self._join(slot, node)
            joined.setdefault(node, []).append(slot)
        for node, slots in joined.items():
            which = f"collector {slots[0]}" if len(slots) == 1 else f"collectors {', '.join(map(str, slots))}"
            self.progress.message(f"{which} joined on node {self.addresses.get(node, node[:8])}")

    def _join(self, slot: int, node: str) -> None:
        self.collectors[slot] = self.launcher.start(slot, NodeAffinitySchedulingStrategy(node, soft=False))
        self.slots.took(slot, node)
        self.restarting[slot], self.died_at[slot] = False, None
        self.deaths[slot] = self.raised[slot] = 0
        self.last_error[slot] = None
        entry = {"collector": slot, "node": node, "ip": self.addresses.get(node), "from_s": self._now_s(),
                 "to_s": None, "left": None}
        self.actors.collector_history.append(entry)
        self.history[slot] = entry
        self._start_loop(slot)

    def _stopped(self, i: int, env_steps: int) -> None:
        """A draining node's collector has stopped, its `env_steps` all stored: it leaves."""
        self._leave(i, "drained")
        self.slots.free(i)
        self.progress.message(f"collector {i} left its draining node with its {env_steps} env steps stored")

    def _died_for_good(self, i: int) -> None:
        self._settle(i, "it died and Ray cannot restart it there")

    def _not_back(self, i: int) -> None:
        self._settle(i, f"it has not come back {self.come_back_s:g}s after its process died")

    def _settle(self, i: int, why: str) -> None:
        """Collector i is gone without stopping: its shard counts what it lacks of its count as lost."""
        counted = self.reported_env_steps(i)
        where = self._where(i)
        self._leave(i, "lost")
        self.settling[i] = self.learner.writer_left.remote(i, counted)
        self.progress.message(f"collector {i} on node {where} is gone ({why}): of the {counted} env steps it "
                              "reported, what its shard does not hold counts as lost")

    def _leave(self, i: int, how: str) -> None:
        collector = self.collectors[i]
        self.collectors[i] = None
        self.loops.pop(i, None)
        self.gone.discard(i)
        self.restarting[i], self.died_at[i] = False, None
        self.learner.collector_left.remote(i)
        ray.kill(collector, no_restart=True)
        entry = self.history.pop(i, None)
        if entry is not None:
            entry["to_s"], entry["left"] = self._now_s(), how

    def _free_settled(self) -> None:
        """Free the slots whose shard has taken its lost collector's count."""
        if not self.settling:
            return
        done, _ = ray.wait(list(self.settling.values()), num_returns=len(self.settling), timeout=0)
        for slot in [s for s, ref in self.settling.items() if ref in done]:
            del self.settling[slot]
            self.slots.free(slot)

    def _where(self, slot: int) -> str:
        node = self.slots.node_of[slot]
        return self.addresses.get(node, node[:8]) if node else "?"

    def _now_s(self) -> float:
        return round(time.time() - self.clock_start, 3)

    def stop(self) -> None:
        super().stop()
        request_room([])
        for entry in self.history.values():
            entry["to_s"], entry["left"] = self._now_s(), "run ended"
