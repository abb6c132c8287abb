"""ReplayShard: one collector's replay storage, served to the learner.

A plain class (no Ray import): cluster/ hosts it in a Ray actor placed on its collector's node, and
tests and the in-process mode call it directly. It owns its storage (a `RingStorage`, or a
`FrameStorage` for pixels), counts inserts and samples, and limits inserts by the
samples-per-insert ratio (the learner limits samples). The insert limit follows the whole fleet:
each sample request and counter poll from the learner brings a `FleetView`, this shard's share of
the global insert room, so a collector that stops inserting does not hold the others back. Until
the first view arrives (and in the lockstep replica, which sends none) the shard applies its own
share of the limiter to its own counters.

With prioritized replay (`priorities` set) the shard also keeps a PriorityIndex over its slots:
chunks bring their transitions' initial |TD errors|, samples are drawn in proportion to mass and
carry importance weights and their keys, and `update_priorities` takes the learner's new |TD
errors| (replay/priorities.py).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import numpy as np

from replay.contracts import Batch, Chunk, FleetView, FrameChunk, PriorityView, ShardCounters
from replay.frames import FrameStorage
from replay.priorities import PriorityIndex, PrioritySettings
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

    def __init__(self, shard_id: int, spec: StorageSpec, limiter: SamplesPerInsertLimiter, seed: int,
                 priorities: PrioritySettings | None = None):
        self.shard_id = shard_id
        self.storage = build_storage(spec)
        self.priorities = PriorityIndex(self.storage.capacity, priorities) if priorities is not None else None
        self.revision = 0  # counts every change of the masses: the learner keeps the newest it saw
        self._weight_min = float("inf")  # the smallest importance weight served since stats() last read it
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
        first_stamp = self.storage.total_added
        placed = self.storage.add(chunk)
        if self.priorities is not None:
            self.priorities.place(placed, first_stamp, chunk.get("priority"))
            self.revision += 1
        if writer_env_steps is not None:
            self.writer_env_steps = max(self.writer_env_steps, writer_env_steps)
        return self._counters()

    def observe_fleet(self, view: FleetView | None) -> None:
        """Take the learner's newest view of the fleet (None, or one of a replaced process: kept out)."""
        if view is not None and view["incarnation"] == self.incarnation:
            self.fleet_view = view

    def sample(self, count: int, num_batches: int = 1, view: FleetView | None = None,
               priority_view: PriorityView | None = None) -> tuple[Batch, ShardCounters]:
        """`num_batches` micro-batches of `count` draws each (uniform, or by priority), in one gather.

        Every field has the leading dimension num_batches ([num_batches, count, ...], or the
        frame-once form of pixel storage); the learner slices one micro-batch per index. Serving
        several micro-batches per call divides the per-call cost of Ray on both sides by
        `num_batches`. Prioritized, the batch also has `weight` (importance weights, global under
        the learner's `priority_view`), `index` and `stamp` (what a priority update names).
        """
        self.observe_fleet(view)
        size = self.storage.size
        if size == 0:
            raise ShardEmpty(f"shard {self.shard_id} holds no transitions yet")
        draws = count * num_batches
        if self.priorities is None:
            rows = self.storage.sample_rows(draws, self.rng)
        else:
            rows = self.priorities.sample(draws, self.rng)
        batch = self.storage.sample_batches(rows.reshape(num_batches, count))
        if self.priorities is not None:
            weights = self.priorities.weights(rows, priority_view, size).astype(np.float32)
            self._weight_min = min(self._weight_min, float(weights.min()))
            batch["weight"] = weights.reshape(num_batches, count)
            batch["index"] = rows.reshape(num_batches, count)
            batch["stamp"] = self.priorities.stamps[rows].reshape(num_batches, count)
        self.sampled += draws
        return batch, self._counters()

    def update_priorities(self, incarnation: str, index: np.ndarray, stamp: np.ndarray, td_abs: np.ndarray) -> int:
        """The learner's new |TD errors| for transitions this process served; an update meant for
        another process (this shard was restarted since) or for a slot overwritten since it was
        sampled is dropped. Returns how many were applied."""
        if self.priorities is None:
            raise ValueError(f"shard {self.shard_id} was built without prioritized replay")
        if incarnation != self.incarnation:
            self.priorities.updates_dropped += len(index)
            return 0
        self.revision += 1
        return self.priorities.update(index, stamp, td_abs)

    def counters(self, view: FleetView | None = None) -> ShardCounters:
        """Size, inserts, samples and the insert room the limiter allows now (after taking `view`)."""
        self.observe_fleet(view)
        return self._counters()

    def _counters(self) -> ShardCounters:
        inserted = self.storage.total_added
        if self.fleet_view is None:
            room = self.limiter.insert_room(inserted, self.sampled, self.storage.size)
        else:  # the share the learner gave, less what this shard took since it looked
            room = self.fleet_view["room"] - (inserted - self.fleet_view["inserted_seen"])
        counters: ShardCounters = {
            "shard_id": self.shard_id,
            "size": self.storage.size,
            "inserted": inserted,
            "sampled": self.sampled,
            "insert_room": room,
            "incarnation": self.incarnation,
        }
        if self.priorities is not None:
            counters.update(priority_mass=self.priorities.total, priority_min=self.priorities.min_mass,
                            revision=self.revision)
        return counters

    def stats(self) -> dict:
        """Counters plus memory figures, for the driver's metrics."""
        storage = self.storage
        stats = {**self.counters(), "capacity": storage.capacity, "nbytes": storage.nbytes,
                 "bytes_per_transition": storage.nbytes / storage.capacity,
                 "writer_env_steps": self.writer_env_steps, "writer_attachments": self.writer_attachments}
        if self.priorities is not None:
            index = self.priorities
            stats.update(priority_max=index.max_mass, priority_updates_applied=index.updates_applied,
                         priority_updates_dropped=index.updates_dropped, is_weight_min=self._weight_min)
            self._weight_min = float("inf")  # a minimum since the last read
        return stats

    def get_state(self) -> dict:
        """Storage, counters and RNG state, for a replay checkpoint; `pause_s` is how long this
        took (the shard serves its collector nothing meanwhile)."""
        start = time.perf_counter()
        state = {"storage": self.storage.get_state(), "sampled": self.sampled, "rng": self.rng.bit_generator.state}
        if self.priorities is not None:
            state["priorities"] = self.priorities.get_state()
        state["pause_s"] = time.perf_counter() - start
        return state

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output (what was stored since is replaced). Replay saved
        without priorities comes back with every transition at the largest mass."""
        self.storage.set_state(state["storage"])
        self.sampled = state["sampled"]
        self.rng.bit_generator.state = state["rng"]
        if self.priorities is not None:
            if "priorities" in state:
                self.priorities.set_state(state["priorities"])
            else:
                self.priorities.reset_to_max(self.storage.sampleable_rows(), self.storage.total_added)
            self.revision += 1
