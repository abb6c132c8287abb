"""The typed messages that cross package boundaries through replay.

Chunk: collector -> its shard, one remote call per chunk (T steps x E envs, already n-step folded);
FrameChunk is its pixel form, where each frame travels once and transitions name frames by number.
Batch: shard -> learner, one micro-batch of uniformly sampled transitions.
ShardCounters: returned with every add and sample so both sides can rate-limit without polling.
The third message, Weights (learner -> collectors), lives in learner/messages.py.

Field names follow time: `obs` is the state the action was taken in, `next_obs` the state
bootstrapped from n steps later; `return` is the folded sum_k gamma^k r_{t+k} and `discount`
is gamma^m, or 0 when the episode terminated inside the window. ("return" is a Python keyword,
hence the functional TypedDict form.)
"""

from __future__ import annotations

from typing import TypedDict

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
        "obs": np.ndarray,
        "action": np.ndarray,
        "return": np.ndarray,
        "discount": np.ndarray,
        "next_obs": np.ndarray,
        "weight": np.ndarray,  # [N] float32 importance weight (ones under uniform sampling)
        "index": np.ndarray,  # [N] int64 storage rows, for priority updates
        "shard_id": np.ndarray,  # [N] int32
    },
)


class ShardCounters(TypedDict):
    """A shard's bookkeeping at the moment it answered."""

    shard_id: int
    size: int
    inserted: int
    sampled: int
    insert_room: float
