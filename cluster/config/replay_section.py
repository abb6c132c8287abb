"""The replay section of the run config: shard capacity, where replay is stored, the rate limiter,
prioritized replay."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from raypex.cluster.config.section import Section


class ReplayConfig(Section):
    """The replay shards (in the learner's process): capacity, storage, the samples-per-insert rate
    limiter and prioritized replay."""

    capacity: int = Field(100_000, ge=1, description="Transitions stored per shard (ring).")
    min_size: int = Field(256, ge=1, description="Transitions in all shards before learning starts.")
    samples_per_insert: float = Field(
        16.0, ge=0.0, description="Replay ratio the limiter holds (samples trained per insert); 0 = off."
    )
    error_buffer: int = Field(
        256, ge=1, description="Transitions of slack the limiter allows either way."
    )
    storage: Literal["auto", "device", "host"] = Field(
        "auto", description="Where a GPU learner keeps replay's bytes: device = in GPU memory (batches are gathered "
        "there, only indices cross to the GPU), host = pinned host memory (batches gathered on the host and "
        "copied); auto = device when replay fits the GPU with room for the update, else host (said at start-up). "
        "A CPU learner keeps replay in its host memory."
    )
    prioritized: bool = Field(
        False, description="Prioritized replay (Ape-X): draw transitions in proportion to (abs(TD error) + "
        "priority_epsilon)^alpha across all shards, with importance weights; off = uniform."
    )
    alpha: float = Field(0.6, ge=0.0, le=1.0, description="Priority exponent: 0 = uniform, 1 = fully proportional.")
    beta: float = Field(0.4, ge=0.0, le=1.0, description="Importance-weight exponent at the first update, "
                        "annealed linearly to 1 over beta_anneal_updates.")
    beta_anneal_updates: int = Field(100_000, ge=1, description="Updates over which beta reaches 1.")
    priority_epsilon: float = Field(1e-6, gt=0.0, le=1.0, description="Added to abs(TD error), so every stored "
                                    "transition can be drawn.")
    sequence_length: int = Field(80, ge=2, le=10_000, description="r2d2: steps in each replayed sequence (its "
                                 "burn-in included).")
    sequence_overlap: int = Field(40, ge=0, description="r2d2: steps each sequence shares with the next; they are "
                                  "stored once, so overlap costs no memory.")
    initial_priority: Literal["td", "max"] = Field(
        "td", description="A new transition's priority: td = its n-step abs(TD error) under the collector's network "
        "(Ape-X), max = the largest priority seen so far."
    )
    prior: str | None = Field(
        None, description="A local Minari dataset (its id, as `raypex export RUN --minari ID` writes one) read into "
        "replay before the first update and kept apart from what the collectors insert; replay.prior_fraction of each "
        "batch is drawn from it (RLPD's prior data). Flat observations; uniform replay of one learner; not r2d2.")
    prior_fraction: float = Field(0.5, gt=0.0, lt=1.0, description="With replay.prior: the share of each batch "
                                  "drawn from the dataset (RLPD's 0.5), the rest from the collectors' transitions.")
