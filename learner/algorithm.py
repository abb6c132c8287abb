"""The seam between the Learner and an algorithm: what one algorithm's update step offers, built
by the plug-in `algo.name` finds in the registry (learner/algorithms/registry.py).

The Learner (learner/learner.py) is the same for every algorithm: draw a batch, run the step
(eager, or its captured CUDA graph), give the replay the step's |TD errors|, publish the step's
policy, report its metrics, save and restore its state. Everything that differs between DQN, TD3
and SAC (networks, optimizers, losses, target updates, what policy.pt2 holds) lives in the step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import torch
from torch import nn

from raypex.learner.gradient_group import GradientGroup
from raypex.learner.precision import PrecisionPolicy

Gather = Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]]


class AlgorithmStep(Protocol):
    """One algorithm's networks, optimizers and whole update from a [G, B] batch."""

    kind: str  # what its checkpoints hold ("dqn", "actor_critic"): a resume with another kind is refused
    policy: nn.Module  # the network collectors and the evaluator act with: published and exported
    policy_key: str  # the key of `state_dict()` that holds `policy`'s weights (a sweep reads them from a checkpoint)
    precision: PrecisionPolicy
    compiled: bool  # whether its networks run through torch.compile
    td_abs: torch.Tensor | None  # prioritized replay: the last update's |TD error| per transition, [G, B]
    gradients: GradientGroup | None  # several learners: gradients summed over the group before each step

    def __call__(self, batch: Mapping[str, torch.Tensor]) -> None:
        """One eager update, gradients cleared after it."""

    def capture(self, example: Mapping[str, torch.Tensor]) -> Callable[[Mapping[str, torch.Tensor]], None]:
        """The update captured as CUDA graphs over static copies of `example` (learner/cuda_graph.py)."""

    def warm_up(self, example: Mapping[str, torch.Tensor]) -> None:
        """Whatever an eager run needs before the clock starts; training state is left as it was."""

    def after_update(self, updates: int) -> None:
        """The host's part after update number `updates` (DQN's hard target copy)."""

    def take_metrics(self, micro_batches: int) -> dict[str, float]:
        """Means over the `micro_batches` since the last call (td_loss, q_values, and the algorithm's own)."""

    def training_tensors(self) -> list[torch.Tensor]:
        """Every tensor an update changes, optimizer state aside."""

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers an update steps."""

    def state_dict(self) -> dict:
        """Networks, optimizers and whatever else an exact resume needs."""

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict` output."""

    def exportable(self, policy: nn.Module) -> tuple[nn.Module, str]:
        """`policy` (a float32 CPU copy of `self.policy`) as policy.pt2 holds it, and what it outputs."""


def take_means(sums: Mapping[str, torch.Tensor], micro_batches: int) -> dict[str, float]:
    """Each named sum over `micro_batches` as a float (one read of the device each), the sums then
    reset to zero: a step's metrics since it last reported (`take_metrics`)."""
    means = {name: float(total) / micro_batches for name, total in sums.items()}
    for total in sums.values():
        total.zero_()
    return means
