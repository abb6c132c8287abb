"""ShardActor: a ReplayShard hosted by Ray, plus the one thing replay/ must not know: its node."""

from __future__ import annotations

import os

import ray

from replay.shard import ReplayShard


class ShardActor(ReplayShard):
    """The replay shard actor (numpy only: it starts without importing torch)."""

    def pid(self) -> int:
        """This actor's process id (bench reads its resident memory)."""
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this shard's storage lives on."""
        return ray.get_runtime_context().get_node_id()
