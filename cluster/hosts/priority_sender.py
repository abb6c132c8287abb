"""PrioritySender: the Ray side of the priority updates (learner -> shards).

The learner hands over one PriorityUpdate per shard per update; a Ray call costs the learner
about as much CPU as a small network's whole update, so a shard's updates are gathered and sent
together every `send_every` updates (one call then carries several updates' priorities, a few
milliseconds late). At most `max_in_flight` calls per shard are unanswered. The learner's update
loop never waits here: finished calls are reaped without blocking, and a send to a shard that
already has `max_in_flight` unanswered is dropped and counted (its transitions keep their old
priorities until sampled again). At the end of a run `flush` sends what is gathered and waits
for the answers, so the shards' counts and the checkpointed priorities include every update.
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

    def flush(self, timeout_s: float = 30.0) -> None:
        """Send every gathered update past the in-flight bound (the update loop has stopped, so
        nothing waits on it now) and wait up to `timeout_s` for the shards to answer."""
        for shard, gathered in enumerate(self.gathered):
            self.gathered[shard] = []
            for merged in merged_by_process(gathered):
                self._send(merged, bounded=False)
        pending = [ref for refs in self.in_flight for ref in refs]
        if pending:
            _, unanswered = ray.wait(pending, num_returns=len(pending), timeout=timeout_s)
            waiting = set(unanswered)
            self.in_flight = [deque(ref for ref in refs if ref in waiting) for refs in self.in_flight]

    def _send(self, update: PriorityUpdate, bounded: bool = True) -> None:
        pending = self.in_flight[update.shard]
        if bounded and not self._room(pending):
            self.dropped += len(update.index)
            return
        pending.append(self.shards[update.shard].update_priorities.remote(
            update.incarnation, update.index, update.stamp, update.td_abs))

    def _room(self, pending: deque) -> bool:
        """Whether a shard has a call to spare, after reaping its answered ones without waiting."""
        if len(pending) >= self.max_in_flight:
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in done:
                pending.remove(ref)  # a shard that died answers with an error: nothing to apply
        return len(pending) < self.max_in_flight
