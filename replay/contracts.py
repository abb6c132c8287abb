"""The contracts between the roles: the three messages, the control exception and the seams.

Every package may import this module and it imports nothing of ours (numpy only), so the collector,
the replay shard, the learner and the Ray wiring agree on one definition of what crosses between
them. The messages:
1. Chunk (collector -> its shard): T steps x E envs already n-step folded, one call per chunk;
   FrameChunk is its pixel form, where each frame travels once and transitions name frames by number.
2. Batch (shard -> learner): one micro-batch of sampled transitions; FrameBatch is its pixel
   form, each sampled frame once plus the indices that build obs and next_obs stacks. With
   prioritized replay both carry `weight` (importance weights), and the source that fetched them
   adds `keys` (SampledKeys: where they came from, for the priority update).
3. Weights (learner -> collectors): a version and the network's parameters.
ShardCounters come back with every add and sample, so both sides rate-limit without polling.
Priority updates (learner -> the shards that served a batch) are PriorityUpdate messages.

Field names follow time: `obs` is the state the action was taken in, `next_obs` the state
bootstrapped from n steps later; `return` is the folded sum_k gamma^k r_{t+k} and `discount` is
gamma^m, or 0 when the episode terminated inside the window ("return" is a Python keyword, hence
the functional TypedDict form).

The seams are callables a component is built with; the same component runs in one process (the
lockstep replica, the tests) or across a cluster (cluster/hosts/ray_seams.py) depending on what is
passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypedDict

import numpy as np

Chunk = TypedDict(
    "Chunk",
    {
        "obs": np.ndarray,  # [N, *obs_shape]
        "action": np.ndarray,  # [N] int64
        "return": np.ndarray,  # [N] float32
        "discount": np.ndarray,  # [N] float32
        "next_obs": np.ndarray,  # [N, *obs_shape]
    },
)

FrameChunk = TypedDict(
    "FrameChunk",
    {
        # Pixel observations (actors/frames.py): each frame once, numbered in its env's stream.
        "frames": np.ndarray,  # [F, E, H, W] uint8, the frames numbered first_index .. first_index+F-1
        "frame_step": np.ndarray,  # [F, E] int32 frames since the episode's first frame
        "first_index": int,
        "env": np.ndarray,  # [N] int64, which env each transition came from
        "obs": np.ndarray,  # [N] int64 stream number of the obs frame (the newest of its stack)
        "action": np.ndarray,
        "return": np.ndarray,
        "discount": np.ndarray,
        "next_obs": np.ndarray,  # [N] int64 stream number of the next_obs frame
    },
)

Batch = TypedDict(
    "Batch",
    {
        # Fields may carry leading dimensions ([num_batches, B, ...] from ReplayShard.sample).
        "obs": np.ndarray,  # [B, *obs_shape] (pixel stacks uint8)
        "action": np.ndarray,  # [B] int64
        "return": np.ndarray,  # [B] float32
        "discount": np.ndarray,  # [B] float32
        "next_obs": np.ndarray,  # [B, *obs_shape]
    },
)
BATCH_FIELDS = ("obs", "action", "return", "discount", "next_obs")

FrameBatch = TypedDict(
    "FrameBatch",
    {
        # Stacked pixel observations, each sampled frame once (replay/frames.py: sample_batches);
        # the learner builds obs = frames[obs_index] on its device. Fields may carry leading
        # dimensions like Batch's.
        "frames": np.ndarray,  # [B * frames_per_sample, H, W] uint8, each transition's in a row
        "obs_index": np.ndarray,  # [B, stack] int64 rows of `frames`, oldest frame first
        "action": np.ndarray,
        "return": np.ndarray,
        "discount": np.ndarray,
        "next_index": np.ndarray,  # [B, stack] int64
    },
)
FRAME_BATCH_FIELDS = ("frames", "obs_index", "action", "return", "discount", "next_index")


def batch_fields(batch: Batch | FrameBatch) -> tuple[str, ...]:
    """The training fields of a Batch or a FrameBatch (with `weight` under prioritized replay),
    in a fixed order."""
    fields = FRAME_BATCH_FIELDS if "frames" in batch else BATCH_FIELDS
    return (*fields, "weight") if "weight" in batch else fields


@dataclass(frozen=True)
class SampledKeys:
    """Which shard process served a micro-batch, and the slots and stamps (replay/priorities.py)
    of its transitions: what a priority update for them must name."""

    shard: int
    incarnation: str
    index: np.ndarray  # [B] int64 slots
    stamp: np.ndarray  # [B] int64


@dataclass(frozen=True)
class PriorityUpdate:
    """New |TD errors| for transitions one shard process served (one message per shard per
    update at most)."""

    shard: int
    incarnation: str
    index: np.ndarray
    stamp: np.ndarray
    td_abs: np.ndarray  # float32


def merged_by_process(updates: list[PriorityUpdate]) -> list[PriorityUpdate]:
    """`updates` as one PriorityUpdate per shard process, in the order each first appears."""
    grouped: dict[tuple[int, str], list[PriorityUpdate]] = {}
    for update in updates:
        grouped.setdefault((update.shard, update.incarnation), []).append(update)
    return [PriorityUpdate(shard, incarnation, np.concatenate([u.index for u in group]),
                           np.concatenate([u.stamp for u in group]), np.concatenate([u.td_abs for u in group]))
            for (shard, incarnation), group in grouped.items()]


def with_keys(micro_batch: dict, shard: int, incarnation: str) -> Batch:
    """A micro-batch as the learner takes it from the shard process that served it: a
    prioritized one's `index` and `stamp` become its SampledKeys, apart from the training fields."""
    if "index" in micro_batch:
        micro_batch["keys"] = SampledKeys(shard, incarnation, micro_batch.pop("index"), micro_batch.pop("stamp"))
    return micro_batch


class PriorityView(TypedDict):
    """The learner's view of the whole prioritized replay, sent with a sample request so the
    shard weighs its draws as one buffer of all shards would: the probability the learner drew
    this shard with (`share`), the total mass, the smallest mass and the transitions of all
    shards, and the importance exponent now."""

    share: float
    total: float
    min: float
    size: int
    beta: float


class ShardCounters(TypedDict, total=False):
    """A shard's bookkeeping at the moment it answered. `incarnation` names the shard's process
    (a shard restarted after a crash starts again from zero under a new one). Prioritized shards
    add their total and smallest mass, and a `revision` that grows with every change of them (so
    the newest of replies that arrive out of order is known)."""

    shard_id: int
    size: int
    inserted: int
    sampled: int
    insert_room: float
    incarnation: str
    priority_mass: float
    priority_min: float
    revision: int


class FleetView(TypedDict):
    """The learner's view of the whole replay fleet, sent to one shard with each sample request
    and counter poll, so the insert side follows the global replay ratio rather than one shard's
    share of it: `room` is this shard's share of the fleet's insert room when the learner looked,
    `inserted_seen` this shard's inserts it had counted then, `incarnation` the shard process they
    came from (a view of a process that was since replaced is ignored)."""

    room: float
    inserted_seen: int
    incarnation: str


@dataclass(frozen=True)
class Weights:
    """One published version of the Q-network's parameters, as float32 numpy arrays: Ray's object
    store hands collectors a zero-copy view and nobody unpickles tensors. Versions only go up; a
    collector loads one only when it is newer than the one it acts with."""

    version: int
    arrays: dict[str, np.ndarray]


class TrainingStopped(Exception):
    """Raised by a batch source that stops waiting for data because the run is ending."""


class PushChunk(Protocol):
    """Collector -> its shard: store one chunk (may block while the replay ratio has no room)."""

    def __call__(self, chunk: Chunk | FrameChunk) -> None: ...


class PollWeights(Protocol):
    """Weights -> collector: the newest weights not handed out yet, else None; never blocks."""

    def __call__(self) -> Weights | None: ...


class NextBatch(Protocol):
    """Shards -> learner: the next micro-batch (blocks until one is there; TrainingStopped ends it)."""

    def __call__(self) -> Batch: ...


class SendPriorities(Protocol):
    """Learner -> shards: priority updates after one update; never blocks (may drop under load)."""

    def __call__(self, updates: list[PriorityUpdate]) -> None: ...


class PublishWeights(Protocol):
    """Learner -> collectors: make a new version available to every collector."""

    def __call__(self, weights: Weights) -> None: ...
