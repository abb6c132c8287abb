"""The typed messages that cross package boundaries through replay.

Chunk: collector -> its shard, one remote call per chunk (T steps x E envs, already n-step folded).
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
