"""Several learners (learner.num) as the run loop's one learner: the first learner's actor answers
the driver for the whole group, so the run loop, the revival and the checkpoints are written once.

The learners are Ray actors of LearnerActor, each hosting the shards of its own collectors
(cluster/plan/topology.py); the first is a GroupLead, which also holds the others by name:
- `warmup` forms the group (its store on the first learner's node, every learner joining with its
  rank: learner/process_group.py), then warms every learner up from the same checkpoint;
- `train_epoch` starts every other learner's epoch and trains its own: each update the learners
  all-gather their replay's figures and all-reduce their gradients (learner/group_feed.py), so all
  step alike; its stats are the first learner's, with the replay's figures summed over the group;
- `replay_stats`, `write_replay`, `load_replay` speak of the run's shards in the run's order,
  asking the learner that holds each;
- the weights, the model in a checkpoint and policy.pt2 are the first learner's (every learner
  holds the same networks), published once to every collector.

A learner of the group that dies, or a collective that fails, ends the first learner's process
too, after asking Ray to restart every other learner: the driver then sees its learner die and
revives it as it would one learner (cluster/driver/revival.py), and `warmup` forms the group again
from restarted processes. A first learner that died alone finds the others still holding their old
group: it has Ray restart them before forming the new one.
"""

from __future__ import annotations

import os
import sys

import ray

from raypex.cluster.hosts.learner_actor import METHOD_OPTIONS, LearnerActor
from raypex.cluster.hosts.learner_host import LearnerRestarted
from raypex.cluster.plan.topology import ReplayPlan
from raypex.learner.settings import LearnerSettings
from raypex.replay.contracts import EpochStats

# A learner Ray is restarting takes these calls once it is back (a fresh one's replay answers,
# its training state refuses: LearnerRestarted). An epoch is never retried: a learner that died
# left the group, and the first learner's own epoch fails with it.
_RETRIED = {"max_task_retries": -1}


class GroupLost(RuntimeError):
    """A learner of the group died, or a collective between the learners failed."""


class GroupLead(LearnerActor):
    """The first learner of a group, answering the driver for every learner (module docstring)."""

    def __init__(self, settings: LearnerSettings, device: str, num_threads: int, replay: ReplayPlan,
                 collector_names: list[str], member_names: list[str], teams: list[list[int]]):
        """`member_names`: the other learners' actor names, by rank; `teams`: the run's collector
        indices whose shards each learner holds, by rank (the first's are this replay's)."""
        super().__init__(settings, device, num_threads, replay, collector_names)
        self.member_names = member_names
        self._members: list | None = None
        # the run's shard i -> (the rank holding it, its index there)
        self.shard_home = {i: (rank, j) for rank, team in enumerate(teams) for j, i in enumerate(team)}

    @property
    def members(self) -> list:
        """The other learners' handles, by rank from 1 (looked up by name once)."""
        if self._members is None:
            self._members = [ray.get_actor(name) for name in self.member_names]
        return self._members

    def _answers(self, refs: list) -> list:
        """The other learners' answers; GroupLost when one of them died."""
        try:
            return ray.get(refs)
        except ray.exceptions.RayError as err:
            raise GroupLost(f"a learner of the group failed: {type(err).__name__}") from err

    def _lose_group(self, err: Exception) -> None:
        """Have Ray restart every other learner, then end this process: the driver revives the group."""
        why = str(err) if isinstance(err, GroupLost) else "a collective with the other learners failed (one died or left)"
        print(f"raypex: {why}; the group of learners restarts from the newest checkpoint", file=sys.stderr, flush=True)
        for member in self.members:
            ray.kill(member, no_restart=False)
        os._exit(1)

    def _answers_or_lose_group(self, refs: list) -> list:
        """The other learners' answers; if one of them died, the group is lost (`_lose_group`)."""
        try:
            return self._answers(refs)
        except GroupLost as err:
            self._lose_group(err)

    def _on_members(self, call) -> list:
        """`call(member)` on every other learner, their answers."""
        return self._answers_or_lose_group([call(member) for member in self.members])

    def _on_one(self, rank: int, call):
        """`call(member)` on learner `rank`, its answer."""
        return self._answers_or_lose_group([call(self.members[rank - 1])])[0]

    # -- forming the group ---------------------------------------------------------------------
    def warmup(self, state: bytes | None = None, version_floor: int = 0) -> dict:
        """Form the group (other learners that trained under a first learner that died are
        restarted first), then warm every learner up from `state`."""
        stale = self._answers([m.is_warmed_up.options(**_RETRIED).remote() for m in self.members])
        for member, trained in zip(self.members, stale):
            if trained:
                ray.kill(member, no_restart=False)
        learners = 1 + len(self.members)
        host = ray.util.get_node_ip_address()
        port = self.open_group(host, learners)
        joined = [m.join_group.options(**_RETRIED).remote(host, port, rank, learners)
                  for rank, m in enumerate(self.members, start=1)]
        self.join_group(host, port, 0, learners, host)
        self._answers(joined)
        warmed = [m.warmup.options(**_RETRIED).remote(state, version_floor) for m in self.members]
        info = LearnerActor.warmup(self, state, version_floor)
        self._answers(warmed)
        return info

    # -- training ------------------------------------------------------------------------------
    @ray.method(**METHOD_OPTIONS["train_epoch"])
    def train_epoch(self) -> EpochStats:
        """Every learner's epoch, in step; the first learner's figures with the group's replay's."""
        theirs = [m.train_epoch.remote() for m in self.members]
        try:
            stats = LearnerActor.train_epoch(self)
            others = self._answers(theirs)
        except LearnerRestarted:
            raise
        except (GroupLost, RuntimeError) as err:  # RuntimeError: gloo's, when a learner it waits on died
            self._lose_group(err)
        stats.writer_env_steps += sum(s.writer_env_steps for s in others)
        stats.wait_fraction = max([stats.wait_fraction, *(s.wait_fraction for s in others)])
        if stats.priority_updates_unsent is not None:
            stats.priority_updates_unsent += sum(s.priority_updates_unsent or 0 for s in others)
        return stats

    @ray.method(**METHOD_OPTIONS["request_stop"])
    def request_stop(self) -> None:
        """Every learner ends its epoch (any one would end the group's)."""
        for member in self.members:
            member.request_stop.remote()
        LearnerActor.request_stop(self)

    def flush_priorities(self) -> int:
        """Every learner's unsent priority updates, summed."""
        return LearnerActor.flush_priorities(self) + sum(self._on_members(lambda m: m.flush_priorities.options(**_RETRIED).remote()))

    # -- the run's shards, in the run's order ----------------------------------------------------
    @ray.method(**METHOD_OPTIONS["replay_stats"])
    def replay_stats(self) -> list[dict]:
        """Every shard's counters, the run's shard i at i."""
        stats = LearnerActor.replay_stats(self)
        for theirs in self._on_members(lambda m: m.replay_stats.options(**_RETRIED).remote()):
            stats += theirs
        return stats

    @ray.method(**METHOD_OPTIONS["write_replay"])
    def write_replay(self, shard: int, location: str) -> dict:
        """The run's shard `shard`, written by the learner that holds it."""
        rank, index = self.shard_home[shard]
        if rank == 0:
            return LearnerActor.write_replay(self, index, location)
        return self._on_one(rank, lambda m: m.write_replay.options(**_RETRIED).remote(index, location))

    @ray.method(**METHOD_OPTIONS["load_replay"])
    def load_replay(self, shard: int, location: str, part: dict | None = None) -> dict:
        """The run's shard `shard`, restored by the learner that holds it."""
        rank, index = self.shard_home[shard]
        if rank == 0:
            return LearnerActor.load_replay(self, index, location, part)
        return self._on_one(rank, lambda m: m.load_replay.options(**_RETRIED).remote(index, location, part))

    @ray.method(**METHOD_OPTIONS["count_lost_writes"])
    def count_lost_writes(self) -> None:
        """Every learner of a revived group counts what its collectors sent that died with it."""
        for member in self.members:
            member.count_lost_writes.options(**_RETRIED).remote()
        LearnerActor.count_lost_writes(self)
