"""Dynamic loss scaling for fp16 that never leaves the device, so it can live inside a CUDA graph.

torch's GradScaler decides on the host whether to skip a step (`scaler.step` reads the inf check
back with `.item()`), which a captured graph cannot do. Here the same three moves are device ops:
- `scale_loss`: loss x scale before backward, so small fp16 gradients do not flush to zero;
- `unscale_`: grads / scale in place, and `found_inf` set to 1 when any grad is inf or NaN;
- `update`: the scale halves after a step with inf/NaN and doubles after `growth_interval`
  clean steps (GradScaler's defaults and rule).
The step itself is skipped on the device too: the fused Adam reads `found_inf` (the learner hands it
to the optimizer once) and leaves parameters and moments untouched when it is 1. `state_dict` has
GradScaler's keys, so checkpoints read the same either way.
"""

from __future__ import annotations

import torch


class DeviceLossScale:
    """A GradScaler whose scale, growth counter and inf flag are device tensors updated in place."""

    def __init__(self, device: torch.device, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.scale = torch.full((), init_scale, dtype=torch.float32, device=device)
        self.growth_tracker = torch.zeros((), dtype=torch.int32, device=device)
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
        self._inv_scale = torch.ones((), dtype=torch.float32, device=device)

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss multiplied by the current scale (backpropagate this one)."""
        return loss * self.scale

    def unscale_(self, grads: list[torch.Tensor]) -> None:
        """Divide `grads` by the scale in place and record in `found_inf` whether any is inf/NaN
        (None for a parameter no loss reached: a learner of a group with an empty part)."""
        self.found_inf.zero_()
        torch.reciprocal(self.scale, out=self._inv_scale)
        grads = [g for g in grads if g is not None]
        if grads:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, self.found_inf, self._inv_scale)

    def update(self) -> None:
        """Back off after an overflow, grow after `growth_interval` clean steps."""
        torch._amp_update_scale_(self.scale, self.growth_tracker, self.found_inf, self.growth_factor,
                                 self.backoff_factor, self.growth_interval)

    def get_scale(self) -> float:
        """The current scale (a host read: for metrics, not for the update loop)."""
        return float(self.scale)

    def state_dict(self) -> dict:
        """GradScaler's checkpoint keys."""
        return {"scale": self.get_scale(), "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": int(self.growth_tracker)}

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict` (or GradScaler's) in place: captured graphs keep their tensors."""
        self.scale.fill_(state["scale"])
        self.growth_tracker.fill_(state["_growth_tracker"])
        self.growth_factor = state["growth_factor"]
        self.backoff_factor = state["backoff_factor"]
        self.growth_interval = state["growth_interval"]
