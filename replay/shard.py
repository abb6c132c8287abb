"""ReplayShard: one collector's replay storage, served to the learner.

A plain class (no Ray import): cluster/ hosts it in a Ray actor placed on its collector's node, and
tests and the in-process mode call it directly. It owns its storage (a `RingStorage`, or a
`FrameStorage` for pixels), counts inserts and samples, and limits inserts by the
samples-per-insert ratio (the learner limits samples). The insert limit follows the whole fleet:
each sample request and counter poll from the learner brings a `FleetView`, this shard's share of
the global insert room, so a collector that stops inserting does not hold the others back. Until
the first view arrives (and in the lockstep replica, which sends none) the shard applies its own
share of the limiter to its own counters.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import numpy as np

from replay.contracts import Batch, Chunk, FleetView, FrameChunk, ShardCounters
from replay.frames import FrameStorage
from replay.rate_limit import SamplesPerInsertLimiter
from replay.ring import RingStorage, transition_layout


@dataclass(frozen=True)
class StorageSpec:
    """What a shard's storage holds: whole transitions, or (frame_stack > 0) stacked pixel
    observations stored frame-once for a collector with `num_envs` envs."""

    capacity: int
    obs_shape: tuple[int, ...]
    obs_dtype: str
    frame_stack: int = 0
    num_envs: int = 1
    n_step: int | None = None  # how far next_obs can be from obs, in frames (frame-once batches)


def build_storage(spec: StorageSpec) -> RingStorage | FrameStorage:
    """The storage a spec describes, allocated at its capacity."""
    if spec.frame_stack:
        return FrameStorage(spec.capacity, spec.num_envs, tuple(spec.obs_shape[1:]), spec.frame_stack,
                            spec.n_step)
    return RingStorage(spec.capacity, transition_layout(spec.obs_shape, spec.obs_dtype))


class ShardEmpty(Exception):
    """Sampled while holding nothing (a shard just restarted after a crash, before new data)."""


class ReplayShard:
    """Ring storage plus counters and an insert-side rate limit for one collector."""

    def __init__(self, shard_id: int, spec: StorageSpec, limiter: SamplesPerInsertLimiter, seed: int):
        self.shard_id = shard_id
        self.storage = build_storage(spec)
        self.limiter = limiter
        self.rng = np.random.default_rng(seed)
        self.sampled = 0
        self.incarnation = uuid.uuid4().hex[:12]  # new in every process that hosts this shard
        self.writer_env_steps = 0  # its collector's env steps up to the newest chunk stored here
        self.writer_attachments = 0  # collector processes that started writing (2+: one was restarted)
        self.fleet_view: FleetView | None = None

    def attach_writer(self) -> int:
        """A collector process starts writing here. Returns the env steps its predecessors' stored
        chunks covered: a restarted collector counts on from there, so env steps never go back
        and count only steps whose data reached replay."""
        self.writer_attachments += 1
        return self.writer_env_steps

    def add(self, chunk: Chunk | FrameChunk, writer_env_steps: int | None = None) -> ShardCounters:
        """Store a whole chunk (which brings its collector's env steps up to `writer_env_steps`);
        the reply tells the collector how much more it may insert."""
        self.storage.add(chunk)
        if writer_env_steps is not None:
            self.writer_env_steps = max(self.writer_env_steps, writer_env_steps)
        return self._counters()

    def observe_fleet(self, view: FleetView | None) -> None:
        """Take the learner's newest view of the fleet (None, or one of a replaced process: kept out)."""
        if view is not None and view["incarnation"] == self.incarnation:
            self.fleet_view = view

    def sample(self, count: int, num_batches: int = 1, view: FleetView | None = None) -> tuple[Batch, ShardCounters]:
        """`num_batches` micro-batches of `count` uniform draws each, in one gather.

        Every field has the leading dimension num_batches ([num_batches, count, ...], or the
        frame-once form of pixel storage); the learner slices one micro-batch per index. Serving
        several micro-batches per call divides the per-call cost of Ray on both sides by
        `num_batches`.
        """
        self.observe_fleet(view)
        if self.storage.size == 0:
            raise ShardEmpty(f"shard {self.shard_id} holds no transitions yet")
        rows = self.storage.sample_rows(count * num_batches, self.rng).reshape(num_batches, count)
        batch = self.storage.sample_batches(rows)
        self.sampled += count * num_batches
        return batch, self._counters()

    def counters(self, view: FleetView | None = None) -> ShardCounters:
        """Size, inserts, samples and the insert room the limiter allows now (after taking `view`)."""
        self.observe_fleet(view)
        return self._counters()

    def _counters(self) -> ShardCounters:
        inserted = self.storage.total_added
        if self.fleet_view is None:
            room = self.limiter.insert_room(inserted, self.sampled)
        else:  # the share the learner gave, less what this shard took since it looked
            room = self.fleet_view["room"] - (inserted - self.fleet_view["inserted_seen"])
        return {
            "shard_id": self.shard_id,
            "size": self.storage.size,
            "inserted": inserted,
            "sampled": self.sampled,
            "insert_room": room,
            "incarnation": self.incarnation,
        }

    def stats(self) -> dict:
        """Counters plus memory figures, for the driver's metrics."""
        storage = self.storage
        return {**self.counters(), "capacity": storage.capacity, "nbytes": storage.nbytes,
                "bytes_per_transition": storage.nbytes / storage.capacity,
                "writer_env_steps": self.writer_env_steps, "writer_attachments": self.writer_attachments}

    def get_state(self) -> dict:
        """Storage, counters and RNG state, for a replay checkpoint; `pause_s` is how long this
        took (the shard serves its collector nothing meanwhile)."""
        start = time.perf_counter()
        state = {"storage": self.storage.get_state(), "sampled": self.sampled, "rng": self.rng.bit_generator.state}
        state["pause_s"] = time.perf_counter() - start
        return state

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output (what was stored since is replaced)."""
        self.storage.set_state(state["storage"])
        self.sampled = state["sampled"]
        self.rng.bit_generator.state = state["rng"]
