"""PrioritySender: the Ray side of the priority updates (learner -> shards).

The learner hands over one PriorityUpdate per shard per update; a Ray call costs the learner
about as much CPU as a small network's whole update, so a shard's updates are gathered and sent
together every `send_every` updates (one call then carries several updates' priorities, a few
milliseconds late). At most `max_in_flight` calls per shard are unanswered. The learner's update
loop never waits here: finished calls are reaped without blocking, and a send to a shard that
already has `max_in_flight` unanswered is dropped and counted (its transitions keep their old
priorities until sampled again).
"""

from __future__ import annotations

from collections import deque

import ray

from replay.contracts import PriorityUpdate, merged_by_process


class PrioritySender:
    """SendPriorities over Ray, bounded in flight per shard, never blocking."""

    def __init__(self, shards: list, max_in_flight: int = 4, send_every: int = 8):
        self.shards = shards
        self.max_in_flight = max_in_flight
        self.send_every = send_every
        self.in_flight: list[deque] = [deque() for _ in shards]
        self.gathered: list[list[PriorityUpdate]] = [[] for _ in shards]
        self.dropped = 0  # transitions whose update was dropped at the in-flight bound

    def __call__(self, updates: list[PriorityUpdate]) -> None:
        """Gather each update for its shard; send a shard's once it holds `send_every`."""
        for update in updates:
            gathered = self.gathered[update.shard]
            gathered.append(update)
            if len(gathered) >= self.send_every:
                self.gathered[update.shard] = []
                for merged in merged_by_process(gathered):
                    self._send(merged)

    def _send(self, update: PriorityUpdate) -> None:
        pending = self.in_flight[update.shard]
        if len(pending) >= self.max_in_flight:
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in done:
                pending.remove(ref)  # a shard that died answers with an error: nothing to apply
        if len(pending) >= self.max_in_flight:
            self.dropped += len(update.index)
            return
        pending.append(self.shards[update.shard].update_priorities.remote(
            update.incarnation, update.index, update.stamp, update.td_abs))
