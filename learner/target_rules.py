"""How target networks follow the networks they track (`learner.target_update`), one rule for
every algorithm's step: Polyak averaging after each step of the tracked networks (`polyak`, rate
`learner.target_tau`), or a whole copy every target period (`hard`, every
`learner.target_update_every_samples`).

The Polyak move is device work inside the update (a captured CUDA graph replays it); the whole
copy runs on the host after an update (`after_update`), in place, so a captured graph keeps
reading the same tensors. A step hands the rule its (target, online) module pairs; pieces that
change at a copy (SALE's frozen embeddings) register a callback with `on_copy`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn


class TargetRule:
    """The target parameters and the online ones they follow, and when they move."""

    def __init__(self, pairs: Sequence[tuple[nn.Module, nn.Module]]):
        self.targets = [p for target, _ in pairs for p in target.parameters()]
        self.followed = [p for _, online in pairs for p in online.parameters()]
        if len(self.targets) != len(self.followed):
            raise ValueError("a target network must have its online network's parameters")
        self._on_copy: list[Callable[[], None]] = []

    def on_copy(self, callback: Callable[[], None]) -> None:
        """Call `callback` after each whole copy of the targets (hard targets only)."""
        self._on_copy.append(callback)

    def after_step(self) -> None:
        """Device work after the tracked networks stepped: nothing by default."""

    def after_update(self, updates: int) -> None:
        """Host work after update number `updates`: nothing by default."""

    def copy_now(self) -> None:
        """Targets := online, in place, then the copy's callbacks."""
        with torch.no_grad():
            torch._foreach_copy_(self.targets, self.followed)
        for callback in self._on_copy:
            callback()


class PolyakTargets(TargetRule):
    """target <- target + tau (online - target) after every step of the tracked networks."""

    def __init__(self, pairs: Sequence[tuple[nn.Module, nn.Module]], tau: float):
        super().__init__(pairs)
        self.tau = tau

    def after_step(self) -> None:
        if self.targets:
            with torch.no_grad():
                torch._foreach_lerp_(self.targets, self.followed, self.tau)  # one fused call: a loop costs ~5x


class PeriodicCopy(TargetRule):
    """target := online every `every` updates."""

    def __init__(self, pairs: Sequence[tuple[nn.Module, nn.Module]], every: int):
        super().__init__(pairs)
        self.every = every

    def after_update(self, updates: int) -> None:
        if updates % self.every == 0:
            self.copy_now()


def target_rule(kind: str, pairs: Sequence[tuple[nn.Module, nn.Module]], tau: float, every: int) -> TargetRule:
    """The rule `learner.target_update` names (`polyak` or `hard`) over `pairs`."""
    if kind == "polyak":
        return PolyakTargets(pairs, tau)
    if kind == "hard":
        return PeriodicCopy(pairs, every)
    raise ValueError(f"learner.target_update {kind!r}: polyak or hard")
