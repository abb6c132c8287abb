"""The local wiring: the run's parts as plain objects in one process, connected as
cluster/plan/topology.py plans, through the in-process seams (cluster/local/seams.py).

What the Ray wiring (cluster/ray_runtime/wiring.py) builds as actors across a cluster, this builds
without Ray: for the local runtime (`raypex train --local`) and tests. With no other thread to insert, a learner the replay ratio holds back lets
every collector collect a chunk: the parts run in lockstep. Given an env-step budget (what is left
of stop.env_steps), the collectors stop at it, and a learner then held back for data ends its
epoch: how far a run goes depends on its config alone, never on when the driver looks.
"""

from __future__ import annotations

from dataclasses import dataclass

from raypex.actors.collector import Collector
from raypex.actors.served_acting import ActingServer, served_in_process
from raypex.cluster.hosts.learner_host import LearnerHost
from raypex.cluster.hosts.weights_evaluator import WeightsEvaluator  # the evaluator actor without Ray
from raypex.cluster.local.seams import ShardWriter, WeightBoard
from raypex.cluster.plan.topology import Topology
from raypex.replay.contracts import TrainingStopped


@dataclass
class LocalRun:
    """Handles of everything a local run built."""

    host: LearnerHost  # the learner and the replay
    collectors: list[Collector]
    evaluator: WeightsEvaluator
    weights: WeightBoard
    acting_server: ActingServer | None = None  # collectors.acting served: every collector's

    @property
    def learner(self):
        """The Learner."""
        return self.host.learner

    @property
    def replay(self):
        """The ShardedReplay."""
        return self.host.replay


def build_local(plan: Topology, device: str = "cpu", env_step_budget: int | None = None) -> LocalRun:
    """Build and connect the plan's components in this process; the collectors together collect
    up to `env_step_budget` env steps (None: no end of their own)."""
    weights = WeightBoard()
    collectors: list[Collector] = []

    def every_collector_collects() -> None:
        for collector in collectors:
            if env_step_budget is not None and sum(c.env_steps for c in collectors) >= env_step_budget:
                raise TrainingStopped("the collectors have collected stop.env_steps")
            collector.collect_chunk()

    # the replay -> the learner (draws, in process); a learner waiting on the limiter lets the collectors run
    (lp,) = plan.learners  # the local runtime has one learner (learner.num 1)
    # one torch thread: the collectors share the process
    host = LearnerHost(lp.settings, device, 1, lp.replay, weights, starved=every_collector_collects)
    # collector i -> shard i of the replay (chunks), the learner -> every collector (weights, through the board)
    # collectors.acting served: one acting server, in this process, for every collector
    server = None
    first = plan.collectors[0].settings
    if first.acting == "served":  # on this process's GPU with act_device cuda (actors/torch_serving.py)
        from raypex.actors.torch_serving import TorchForward

        server = ActingServer(TorchForward(first, "cuda") if first.act_device == "cuda" else None)
    for c in plan.collectors:
        writer = ShardWriter(host, c.index)
        served = served_in_process(server) if server is not None else None
        writer.collector = Collector(c.settings, writer.push, weights.reader(), served)
        collectors.append(writer.collector)
    # the driver -> the evaluator: the caller hands it weights to evaluate
    evaluator = WeightsEvaluator(plan.evaluator)
    return LocalRun(host, collectors, evaluator, weights, server)
