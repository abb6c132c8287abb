"""The local wiring: the run's parts as plain objects in one process, connected as
cluster/config/topology.py plans, through the in-process seams (cluster/local/seams.py).

What the Ray wiring (cluster/driver/wiring.py) builds as actors across a cluster, this builds
without Ray: for the lockstep replica, tests and debugging a config.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.collector import Collector
from cluster.config.topology import Topology
from cluster.hosts.evaluator_actor import EvaluatorActor  # a plain class; Ray only hosts it in a run
from cluster.local.seams import LocalBatchSource, WeightBoard
from learner.learner import Learner
from replay.mixing import ShardMixer
from replay.shard import ReplayShard


@dataclass
class LocalRun:
    """Handles of everything a local run built."""

    shards: list[ReplayShard]
    collectors: list[Collector]
    learner: Learner
    evaluator: EvaluatorActor
    weights: WeightBoard


def build_local(plan: Topology, device: str = "cpu") -> LocalRun:
    """Build and connect the plan's components in this process."""
    import torch

    shards = [ReplayShard(p.index, p.spec, p.limiter, p.seed, p.priorities) for p in plan.shards]
    weights = WeightBoard()
    # collector i -> shard i (chunks), the learner -> every collector (weights, through the board)
    collectors = [Collector(c.settings, shards[c.index].add, weights.reader()) for c in plan.collectors]

    def every_collector_collects() -> None:
        for collector in collectors:
            collector.collect_chunk()

    # every shard -> the learner (batches); a learner waiting on the limiter lets the collectors run
    lp = plan.learner
    mixer = ShardMixer(len(shards), lp.settings.micro_batch, lp.limiter, lp.settings.seed, lp.beta)
    source = LocalBatchSource(shards, mixer, starved=every_collector_collects)
    learner = Learner(lp.settings, torch.device(device), source.next_batch, weights.publish,
                      source.send_priorities)
    # the driver -> the evaluator: the caller hands it weights to evaluate
    evaluator = EvaluatorActor(*plan.evaluator_args)
    return LocalRun(shards, collectors, learner, evaluator, weights)
