"""ShardActor: a ReplayShard hosted by Ray, plus the one thing replay/ must not know: its node."""

from __future__ import annotations

import os

import ray

from cluster.hosts.ray_seams import QUIET
from replay.shard import ReplayShard


class ShardActor(ReplayShard):
    """The replay shard actor (numpy only: it starts without importing torch). Its hot methods
    are the ReplayShard ones, marked to record no Ray task events."""

    @QUIET
    def add(self, chunk, writer_env_steps: int | None = None):
        """ReplayShard.add."""
        return ReplayShard.add(self, chunk, writer_env_steps)

    @QUIET
    def sample(self, count: int, num_batches: int = 1, view=None, priority_view=None):
        """ReplayShard.sample."""
        return ReplayShard.sample(self, count, num_batches, view, priority_view)

    @QUIET
    def update_priorities(self, incarnation, index, stamp, td_abs) -> int:
        """ReplayShard.update_priorities."""
        return ReplayShard.update_priorities(self, incarnation, index, stamp, td_abs)

    @QUIET
    def counters(self, view=None):
        """ReplayShard.counters."""
        return ReplayShard.counters(self, view)

    @QUIET
    def stats(self) -> dict:
        """ReplayShard.stats."""
        return ReplayShard.stats(self)

    @QUIET  # every checkpoint: hundreds in a long run
    def get_state(self) -> dict:
        """ReplayShard.get_state."""
        return ReplayShard.get_state(self)

    def pid(self) -> int:
        """This actor's process id (bench reads its resident memory)."""
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this shard's storage lives on."""
        return ray.get_runtime_context().get_node_id()
