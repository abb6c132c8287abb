"""Topology: every component of a run and every connection between them, planned once.

`plan_run` turns a config into the list of what to build (each shard, collector, the learner and
the evaluator, with the settings it is built from) and names the connections. Two wirings build
from it: cluster/driver/wiring.py as Ray actors across a cluster, cluster/local/wiring.py as plain
objects in one process (the lockstep replica, tests, debugging). The connections, each made by
both wirings with the seam of replay/contracts.py it travels through:

- collector i -> shard i: chunks (PushChunk). A collector and its shard share a node; the shard
  outlives a collector that dies, and the restarted collector writes to it again.
- every shard -> the learner: micro-batches (NextBatch), each from one shard drawn in proportion
  to its size (or, prioritized, its priority mass), under the learner's share of the
  samples-per-insert limiter; the shards apply the insert share to their collectors.
- the learner -> every shard it sampled: priority updates (SendPriorities), prioritized replay only.
- the learner -> every collector: weights (PublishWeights -> PollWeights), one copy per version.
- the driver -> the evaluator: which published weights to evaluate, every eval.every_epochs epochs.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.envs import EnvSpec
from actors.settings import CollectorSettings
from cluster.config.schema import RunConfig
from cluster.config.settings import (
    beta_schedule,
    collector_settings,
    evaluator_args,
    learner_limiter,
    learner_settings,
    priority_settings,
    shard_limiter,
    storage_spec,
)
from learner.settings import LearnerSettings
from replay.mixing import BetaSchedule
from replay.priorities import PrioritySettings
from replay.rate_limit import SamplesPerInsertLimiter
from replay.shard import StorageSpec


@dataclass(frozen=True)
class ShardPlan:
    """One replay shard: what it stores, its insert-side limiter and its sampling seed."""

    index: int
    spec: StorageSpec
    limiter: SamplesPerInsertLimiter
    seed: int
    priorities: PrioritySettings | None = None  # None: uniform replay


@dataclass(frozen=True)
class CollectorPlan:
    """One collector, writing to the shard of the same index."""

    index: int
    settings: CollectorSettings
    max_pushes_in_flight: int


@dataclass(frozen=True)
class LearnerPlan:
    """The learner, reading from every shard and publishing to every collector."""

    settings: LearnerSettings
    limiter: SamplesPerInsertLimiter  # the whole limiter, applied to what it samples
    prefetch: int  # micro-batches requested ahead
    num_threads: int  # torch threads
    beta: BetaSchedule | None = None  # prioritized replay's importance exponent (None: uniform)


@dataclass(frozen=True)
class Topology:
    """What a run is made of (see the module docstring for how the parts connect)."""

    shards: list[ShardPlan]
    collectors: list[CollectorPlan]
    learner: LearnerPlan
    evaluator_args: tuple


def plan_run(config: RunConfig, spec: EnvSpec) -> Topology:
    """The topology of `config` for the env `spec` describes."""
    num = config.collectors.num
    shards = [ShardPlan(i, storage_spec(config, spec), shard_limiter(config), config.seed + i, priority_settings(config))
              for i in range(num)]
    collectors = [CollectorPlan(i, collector_settings(config, spec, i), config.collectors.max_pushes_in_flight)
                  for i in range(num)]
    lc = config.learner
    learner = LearnerPlan(learner_settings(config, spec), learner_limiter(config), lc.prefetch,
                          max(1, int(lc.num_cpus)), beta_schedule(config))
    return Topology(shards, collectors, learner, evaluator_args(config, spec))
