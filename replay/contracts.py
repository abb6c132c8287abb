"""The contracts between the roles: the three messages, the control exception and the seams.

Every package may import this module and it imports nothing of ours (numpy only), so the collector,
the replay, the learner and the Ray wiring agree on one definition of what crosses between
them. The messages:
1. Chunk (collector -> its shard, in the learner's process): T steps x E envs already n-step
   folded, one call per chunk; FrameChunk is its pixel form, where each frame travels once and
   transitions name frames by number. This is the one place transition bytes cross processes.
2. Batch (replay -> update, inside the learner's process): indices drawn on the host
   (replay/sharded.py: Draw) and the fields gathered from them where the replay's columns are
   (the learner's host memory, or its GPU). Batch is the gathered form; pixel stacks stay uint8.
3. Weights (learner -> collectors): a version and the network's parameters.

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
        "action": np.ndarray,  # [N] int64 (dqn), or [N, action_dim] float32 in [-1, 1] (td3, sac)
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
        "action": np.ndarray,  # as in Chunk
        "return": np.ndarray,
        "discount": np.ndarray,
        "next_obs": np.ndarray,  # [N] int64 stream number of the next_obs frame
    },
)

Batch = TypedDict(
    "Batch",
    {
        # Every field has the leading shape [G, B] (G micro-batches of B transitions).
        "obs": np.ndarray,  # [G, B, *obs_shape] (pixel stacks uint8)
        "action": np.ndarray,  # [G, B] int64, or [G, B, action_dim] float32
        "return": np.ndarray,  # [G, B] float32
        "discount": np.ndarray,  # [G, B] float32
        "next_obs": np.ndarray,  # [G, B, *obs_shape]
    },
)
BATCH_FIELDS = ("obs", "action", "return", "discount", "next_obs")


@dataclass(frozen=True)
class Weights:
    """One published version of the Q-network's parameters, as float32 numpy arrays: Ray's object
    store hands collectors a zero-copy view and nobody unpickles tensors. Versions only go up; a
    collector loads one only when it is newer than the one it acts with."""

    version: int
    arrays: dict[str, np.ndarray]
    # A fresh learner's starting weights, published before any update: TD3 and SAC collectors keep
    # acting uniformly at random until trained weights come (the replay warm-up)
    untrained: bool = False


class TrainingStopped(Exception):
    """Raised by the learner's replay feed when it stops waiting for data because the run is ending."""


class PushChunk(Protocol):
    """Collector -> its shard: store one chunk (may block while the replay ratio has no room)."""

    def __call__(self, chunk: Chunk | FrameChunk) -> None: ...


class PollWeights(Protocol):
    """Weights -> collector: the newest weights not handed out yet, else None; never blocks."""

    def __call__(self) -> Weights | None: ...


class PublishWeights(Protocol):
    """Learner -> collectors: make a new version available to every collector."""

    def __call__(self, weights: Weights) -> None: ...
