"""The local wiring: the run's parts as plain objects in one process, connected as
cluster/config/topology.py plans, through the in-process seams (cluster/local/seams.py).

What the Ray wiring (cluster/driver/wiring.py) builds as actors across a cluster, this builds
without Ray: for the lockstep replica, tests and debugging a config.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.collector import Collector
from cluster.config.topology import Topology
from cluster.hosts.weights_evaluator import WeightsEvaluator  # the evaluator actor without Ray
from cluster.local.seams import WeightBoard
from learner.learner import Learner
from replay.sharded import ShardedReplay


@dataclass
class LocalRun:
    """Handles of everything a local run built."""

    replay: ShardedReplay
    collectors: list[Collector]
    learner: Learner
    evaluator: WeightsEvaluator
    weights: WeightBoard


def build_local(plan: Topology, device: str = "cpu") -> LocalRun:
    """Build and connect the plan's components in this process."""
    import torch

    replay, _ = plan.learner.replay.build(torch.device(device))
    weights = WeightBoard()
    # collector i -> shard i of the replay (chunks), the learner -> every collector (weights, through the board)
    collectors = [Collector(c.settings, lambda chunk, i=c.index: replay.add(i, chunk), weights.reader())
                  for c in plan.collectors]

    def every_collector_collects() -> None:
        for collector in collectors:
            collector.collect_chunk()

    # the replay -> the learner (draws, in process); a learner waiting on the limiter lets the collectors run
    learner = Learner(plan.learner.settings, torch.device(device), replay, weights.publish,
                      starved=every_collector_collects)
    # the driver -> the evaluator: the caller hands it weights to evaluate
    evaluator = WeightsEvaluator(*plan.evaluator_args)
    return LocalRun(replay, collectors, learner, evaluator, weights)
