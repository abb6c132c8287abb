"""Mixed precision: which autocast dtype a device runs, and the fp16 gradient scaler.

bf16 autocast runs on CPU and on CUDA with no scaler (bf16 has fp32's exponent range). fp16 runs
on CUDA only and needs loss scaling so small gradients do not flush to zero (DeviceLossScale, which
a CUDA graph can hold). fp32 turns autocast off. The policy is chosen once at learner start and
reported; nothing falls back silently.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from raypex.learner.cpu_features import cpu_has_bf16_units
from raypex.learner.loss_scale import DeviceLossScale


@dataclass
class PrecisionPolicy:
    """Autocast settings plus an optional gradient scaler for one device."""

    device_type: str
    dtype: torch.dtype | None  # None: no autocast (fp32)
    scaler: DeviceLossScale | None

    def autocast(self):
        """A context that runs the forward pass in the chosen precision."""
        if self.dtype is None:
            return contextlib.nullcontext()
        # No weight-cast cache: a captured graph must recompute the casts on every replay, and each
        # weight is cast once per micro-batch anyway (one online and one target pass).
        return torch.autocast(device_type=self.device_type, dtype=self.dtype, cache_enabled=False)

    @property
    def name(self) -> str:
        """fp32, bf16 or fp16 (+scaler)."""
        if self.dtype is None:
            return "fp32"
        return "fp16+scaler" if self.scaler is not None else str(self.dtype).removeprefix("torch.")


def fp32_head(head: nn.Linear, features: torch.Tensor) -> torch.Tensor:
    """`head(features)` outside autocast, in the head's own dtype (fp32 when training). Why: a
    bf16 output has 8 bits of mantissa, so a Q-value near 500 would move in steps of 2 to 4, as
    large as a step's reward; the hidden layers keep bf16's speed, the heads cost little."""
    with torch.autocast(features.device.type, enabled=False):
        return head(features.to(head.weight.dtype))


WIDE_MLP = 256  # hidden units from which a TD3/SAC MLP trains faster in bf16 on a CPU with bf16 units


def resolve_precision(precision: str, device: torch.device, pixels: bool, wide_actor_critic: bool = False) -> str:
    """`precision`, with 'auto' replaced by the fastest measured (BENCHMARKS.md (git history), "The learner on
    its GPU", "bf16 on a CPU without bf16 units" and "bf16 for TD3 and SAC on a CPU"): fp16 for the
    CNN on CUDA (1.4x fp32 captured and compiled on an H100, where bf16 was no faster than fp32);
    for it on a CPU, bf16 where the CPU has bf16 matrix instructions (1.5x fp32 on an AVX512-BF16
    box) and fp32 where it does not (there bf16 is emulated: 9x slower than fp32 on an AVX2-only
    EPYC). For an MLP fp32 (the casts cost more than a small MLP's matmuls save), except TD3's and
    SAC's of WIDE_MLP units or more (`wide_actor_critic`) on a CPU with bf16 units: bf16 there,
    their heads in fp32 (`fp32_head`)."""
    if precision != "auto":
        return precision
    if not pixels:
        return "bf16" if wide_actor_critic and device.type == "cpu" and cpu_has_bf16_units() else "fp32"
    if device.type == "cuda":
        return "fp16"
    return "bf16" if cpu_has_bf16_units() else "fp32"


def make_precision(precision: str, device: torch.device) -> PrecisionPolicy:
    """The policy for `precision` ('fp32', 'bf16', 'fp16') on `device`; fp16 needs CUDA."""
    if precision == "fp32":
        return PrecisionPolicy(device.type, None, None)
    if precision == "bf16":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ValueError("learner.precision bf16 is not supported by this GPU; use fp16 or fp32")
        return PrecisionPolicy(device.type, torch.bfloat16, None)
    if precision == "fp16":
        if device.type != "cuda":
            raise ValueError("learner.precision fp16 needs a CUDA device; use bf16 or fp32 on CPU")
        return PrecisionPolicy(device.type, torch.float16, DeviceLossScale(device))
    raise ValueError(f"learner.precision must be fp32, bf16 or fp16, got {precision!r}")


def configure_cuda_math() -> None:
    """TF32 for fp32 matmuls and convolutions (tensor cores at fp32's range, about 1e-3 relative
    error, far below a DQN update's noise), and cuDNN autotuning for the fixed batch shapes."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
