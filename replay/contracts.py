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
The figures the driver reads are typed here too: CollectorStats (each collector), ShardStats (each
shard of the learner's replay) and EpochStats (each learner epoch).

Field names follow time: `obs` is the state the action was taken in, `next_obs` the state
bootstrapped from n steps later; `return` is the folded sum_k gamma^k r_{t+k} and `discount` is
gamma^m, or 0 when the episode terminated inside the window ("return" is a Python keyword, hence
the functional TypedDict form).

Observations in parts (Dict and Tuple spaces) travel as one array per part, named as the end of
this module says.

The seams are callables a component is built with; the same component runs in one process (the
lockstep replica, the tests) or across a cluster (cluster/hosts/ray_seams.py) depending on what is
passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

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
        # Observations in parts (replay/contracts.py) send `frames.<key>` [F, E, *part shape] instead.
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
        # Every field has the leading shape [G, B] (G micro-batches of B transitions). Observations in
        # parts come as `obs.<key>` and `next_obs.<key>` fields (replay/contracts.py).
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
    """One published version of the acting network's parameters, as float32 numpy arrays: Ray's
    object store hands collectors a zero-copy view and nobody unpickles tensors. Versions only go
    up; a collector loads one only when it is newer than the one it acts with."""

    version: int
    arrays: dict[str, np.ndarray]
    # A fresh learner's starting weights, published before any update: TD3 and SAC collectors keep
    # acting uniformly at random until trained weights come (the replay warm-up)
    untrained: bool = False
    # The acting graph (learner/acting_graph.py): ONNX bytes the arrays are fed to, the same for
    # every version of a run; sent with each, so a collector Ray restarts has it with its first weights
    acting_graph: bytes = b""


@dataclass
class CollectorStats:
    """One collector's counters, as the driver polls them a few times a second."""

    index: int
    env_steps: int  # transitions sent to its shard (the reset step after an episode is not one)
    first_step_at: float | None  # wall clock of its first env step
    chunks_pushed: int
    transitions_pushed: int
    episode_returns: list[float]  # the episodes finished since the last poll (drained by each poll)
    episode_lengths: list[int]
    epsilon: float  # the exploration rate or noise it acts with now
    exploration: str | None  # what `epsilon` is: "epsilon" (a greedy rate), "noise" (TD3's), None (SAC samples)
    version: int  # the newest weights version it took (-1: none; TD3/SAC act at random under untrained ones)
    version_loaded_at: float | None
    max_weight_load_s: float  # the longest its env loop paused to take new weights
    phase_s: dict[str, float]  # seconds per phase of its loop (env, act, push, throttle, ...)
    act_precision: str
    act_form: str
    startup: dict[str, float] = field(default_factory=dict)  # its process's start moments (Ray actors only)
    env_step_running_s: float = 0.0  # how long the env step running now has taken (0: none running)
    episodes: int = 0  # finished since this collector process began (a poll whose answer is lost loses none)
    return_sum: float = 0.0  # their returns, summed

    @classmethod
    def idle(cls, index: int) -> CollectorStats:
        """The counters of a slot no collector has taken yet (collectors.num auto)."""
        return cls(index, 0, None, 0, 0, [], [], 0.0, None, -1, None, 0.0, {}, "fp32", "none")


@dataclass(frozen=True)
class PriorityStats:
    """A prioritized shard's figures since the last poll."""

    mass: float  # the sum of its priorities
    max_mass: float
    updates_applied: int  # transitions whose new priority was applied
    updates_dropped: int  # priorities that came back after their transition was overwritten
    is_weight_min: float  # the smallest importance weight drawn since the last poll


@dataclass(frozen=True)
class ShardStats:
    """One replay shard's counters and memory, as the driver polls them."""

    shard_id: int
    size: int  # env steps held (transitions; for sequences, the steps they are read from)
    inserted: int  # env steps
    sampled: int  # env steps trained on (a sequence counts its length)
    capacity: int  # env steps
    nbytes: int
    writer_env_steps: int  # its collector's env steps up to its newest stored chunk
    writer_attachments: int  # collector processes that wrote to it: all but the first were restarts
    lost_writes: int  # what its collector sent that died with a learner process
    priorities: PriorityStats | None = None  # prioritized replay only

    @property
    def bytes_per_transition(self) -> float:
        return self.nbytes / self.capacity


@dataclass
class EpochStats:
    """One learner epoch's figures (Learner.train_epoch; the learner's host adds the wait and the
    replay's figures)."""

    updates_in_epoch: int  # 0: cut before its first update (the run is stopping), and not counted
    epoch_s: float
    updates: int  # the learner's updates so far
    epochs: int
    version: int  # the newest weights version it published
    samples_per_update: int = 0
    broadcast_ms: float = 0.0
    first_update_at: float | None = None  # wall clock of the learner's first update
    losses: dict[str, float] = field(default_factory=dict)  # the algorithm's means, TensorBoard's losses/<name>
    grad_scale: float | None = None  # fp16's loss scale
    wait_fraction: float = 0.0  # of epoch_s spent waiting for data
    fill_wait_s: float = 0.0  # waiting for the replay to reach its minimum size, so far
    beta: float | None = None  # prioritized replay's importance exponent now
    priority_updates_unsent: int | None = None  # transitions whose errors the learner did not send
    gpu_busy_fraction: float | None = None
    writer_env_steps: int = 0  # the collectors' env steps up to each shard's newest stored chunk, summed
    allreduce_fraction: float | None = None  # several learners: of epoch_s, summing the gradients across them


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


# -- observations in parts -------------------------------------------------------------------------
# An env whose observation space is a Dict (or a Tuple) is seen by every role as a mapping from part
# key to array (a Tuple's parts are keyed "0", "1", ... in order): the collector's batch is
# {key: [E, *part_shape]}, the replay keeps one column per part (replay/frames.py), and the
# learner's networks take {key: [B, *part_shape]}. Where arrays travel by name (a batch's fields,
# the acting graph's inputs, an acting server's requests) a part is the field's name, a dot and its
# key: `obs.image`, `next_obs.image`. One array (a Box observation) is its field itself. Only dict
# and sequence operations here, so that numpy arrays and torch tensors both go through.

SEPARATOR = "."
Parts = tuple[tuple[str, tuple[int, ...], str], ...]  # (key, shape, dtype) of each part, in the space's order


def fields(name: str, obs: Any) -> dict[str, Any]:
    """`obs` as named arrays: {name: obs} for one array, {name.key: part} for parts."""
    if isinstance(obs, Mapping):
        return {f"{name}{SEPARATOR}{key}": part for key, part in obs.items()}
    return {name: obs}


def nested(flat: Mapping[str, Any], names: tuple[str, ...] = ("obs", "next_obs")) -> dict[str, Any]:
    """`flat` with each of `names` given as parts (`name.key` fields) gathered into one mapping
    under `name`; every other field as it is."""
    out: dict[str, Any] = {}
    for flat_name, value in flat.items():
        name, dot, key = flat_name.partition(SEPARATOR)
        if dot and name in names:
            out.setdefault(name, {})[key] = value
        else:
            out[flat_name] = value
    return out


def first_part(obs: Any) -> Any:
    """The array `obs` is, or its first part (what a batch's size is read from)."""
    return next(iter(obs.values())) if isinstance(obs, Mapping) else obs


def batch_size(obs: Any) -> int:
    """Observations in a batch of one array or of parts (read from the shape, which an exporter's
    trace keeps symbolic where `len` would fix it)."""
    return first_part(obs).shape[0]


def each_part(function, *observations: Any) -> Any:
    """`function` applied to the arrays of `observations` (one array each, or parts with the same
    keys), keeping the structure: cat, index or move a batch whatever its observations are."""
    if isinstance(observations[0], Mapping):
        return {key: function(*(obs[key] for obs in observations)) for key in observations[0]}
    return function(*observations)


def indexed(obs: Any, index: Any) -> Any:
    """`obs[index]`, of one array or of each part (a micro-batch of a batch, say)."""
    return each_part(lambda array: array[index], obs)
