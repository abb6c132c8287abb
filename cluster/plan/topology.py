"""Topology: every component of a run and every connection between them, planned once.

`plan_run` turns a config into the list of what to build (each collector, the replay, the learner
and the evaluator, with the settings it is built from) and names the connections. Two wirings
build from it: cluster/ray_runtime/wiring.py as Ray actors across a cluster, cluster/local/wiring.py as
plain objects in one process (`raypex train --local`, tests). The connections, each made
by both wirings with the seam of replay/contracts.py it travels through:

- collector i -> its shard of the replay, which lives in its learner's process: chunks
  (PushChunk), the one place transition bytes cross processes. The shard outlives a collector that
  dies, and the restarted collector writes to it again. With one learner, collector i writes to
  shard i; with several (learner.num), the collectors are split among them in order and each
  learner's shards are its own collectors', its shard j collector j of its team.
- learner -> learner (several): each update's figures and gradients over torch.distributed
  (learner/group_feed.py, learner/gradient_group.py); the first learner publishes the weights,
  writes the model into checkpoints and answers the driver for the group.
- the replay -> the learner: draws and gathers in one process (replay/sharded.py,
  learner/replay_feed.py), no seam: nothing per batch crosses a process; new |TD errors| go back
  the same way.
- the learner -> every collector: weights (PublishWeights -> PollWeights), one copy per version.
- the driver -> the evaluator: which published weights to evaluate, every eval.every_env_steps env steps (or eval.every_s).
"""

from __future__ import annotations

from dataclasses import dataclass

from raypex.actors.envs import EnvSpec
from raypex.actors.settings import CollectorSettings, EvaluatorSettings
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.plan.prior import prior_transitions
from raypex.cluster.plan.settings import (
    beta_schedule,
    collector_settings,
    evaluator_settings,
    learner_settings,
    priority_settings,
    replay_limiter,
    storage_spec,
)
from raypex.learner.settings import LearnerSettings
from raypex.replay.priorities import BetaSchedule, PrioritySettings
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.shard import StorageSpec


@dataclass(frozen=True)
class ReplayPlan:
    """The replay: one shard per collector, what each stores, the limiter and sampling seed, and
    where a GPU learner keeps its bytes (replay.storage)."""

    num_shards: int
    spec: StorageSpec
    limiter: SamplesPerInsertLimiter
    seed: int
    priorities: PrioritySettings | None = None  # None: uniform replay
    beta: BetaSchedule | None = None
    storage: str = "auto"  # auto | device | host
    prior: dict | None = None  # replay.prior's transitions (cluster/plan/prior.py), drawn beside the shards'
    prior_fraction: float = 0.5  # of each draw

    def build(self, device):
        """(the ShardedReplay this plans, in this process, its columns where `storage` and the
        torch `device` say; a one-line notice when auto kept them off the GPU, else None)."""
        from raypex.learner.device_columns import choose_columns
        from raypex.replay.sharded import ShardedReplay

        blocks = self.num_shards + (self.prior is not None)
        backend, notice = choose_columns(self.storage, device, self.spec.column_bytes * blocks)
        replay = ShardedReplay(self.num_shards, self.spec, self.limiter, self.seed, self.priorities, self.beta, backend,
                               self.prior, self.prior_fraction)
        return replay, notice


@dataclass(frozen=True)
class CollectorPlan:
    """One collector, writing to shard `shard` of learner `learner`."""

    index: int
    settings: CollectorSettings
    max_pushes_in_flight: int
    learner: int = 0  # the rank of the learner hosting its shard
    shard: int = 0  # its shard's index among that learner's


@dataclass(frozen=True)
class LearnerPlan:
    """One learner, hosting the shards of `collectors` (in order) and, the first, publishing to
    every collector."""

    settings: LearnerSettings
    replay: ReplayPlan
    num_threads: int  # torch threads
    rank: int = 0
    collectors: tuple[int, ...] = ()  # the run's collector indices whose shards it hosts


@dataclass(frozen=True)
class Topology:
    """What a run is made of (see the module docstring for how the parts connect)."""

    collectors: list[CollectorPlan]
    learners: list[LearnerPlan]  # one, or learner.num: their ranks in the group
    evaluator: EvaluatorSettings


def team_collectors(num_collectors: int, num_learners: int) -> list[list[int]]:
    """The collectors of each learner: in order, as even as they divide (5 over 2: [0, 1, 2], [3, 4])."""
    base, extra = divmod(num_collectors, num_learners)
    teams, start = [], 0
    for rank in range(num_learners):
        size = base + (rank < extra)
        teams.append(list(range(start, start + size)))
        start += size
    return teams


def plan_run(config: RunConfig, spec: EnvSpec) -> Topology:
    """The topology of `config` for the env `spec` describes."""
    teams = team_collectors(config.collectors.shards, config.learner.num)
    where = {i: (rank, j) for rank, team in enumerate(teams) for j, i in enumerate(team)}
    collectors = [CollectorPlan(i, collector_settings(config, spec, i), config.collectors.max_pushes_in_flight, *where[i])
                  for i in range(config.collectors.shards)]
    # a group draws from replay on the host (learner/group_feed.py)
    storage = config.replay.storage if len(teams) == 1 else "host"
    settings = learner_settings(config, spec)
    prior = prior_transitions(config, spec)
    learners = [LearnerPlan(settings, ReplayPlan(len(team), storage_spec(config, spec), replay_limiter(config),
                                                 config.seed + rank, priority_settings(config), beta_schedule(config),
                                                 storage, prior, config.replay.prior_fraction),
                            max(1, int(config.learner.num_cpus)), rank, tuple(team))
                for rank, team in enumerate(teams)]
    return Topology(collectors, learners, evaluator_settings(config, spec))
