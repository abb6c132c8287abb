"""LearnerSettings: the explicit hyperparameters the Learner is built from (torch-free module,
so the driver can build it without importing torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LearnerSettings:
    """The learner's hyperparameters (the fields of the learner, algo and network config)."""

    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int
    hidden: list[int]
    dueling: bool
    double_dqn: bool
    huber_delta: float
    lr: float
    adam_eps: float
    max_grad_norm: float
    micro_batch: int
    accumulation_steps: int
    target_update: str
    target_update_every: int
    target_tau: float
    updates_per_epoch: int
    broadcast_every_epochs: int
    precision: str
    compile: bool
    seed: int
