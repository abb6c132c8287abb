"""ActingPolicy: the collector's Q-network for choosing actions, in the form this CPU runs fastest.

Two choices, each timed on the collector's own batch shape when it starts, so that the same config
is right on a laptop and on a GPU box's cores:
- precision: on a CPU with native bf16 matrix units (AVX512-BF16, AMX) a bf16 copy of the Nature
  CNN chooses actions 2-2.5x faster than float32; on others bf16 is emulated and slower.
- fusion: the acting network traced once with TorchScript and run through oneDNN Graph, which
  fuses each convolution with its ReLU and keeps the weights in the layout its kernels want
  (1.6-2x on the Nature CNN in bf16; nothing for MLPs, so `auto` traces image networks only).
  The trace shares the module's parameter tensors, so published weights reach it with no retrace.
  torch.jit is deprecated upstream; where tracing fails the collector acts eagerly (`auto`).
Published weights always land in the float32 network first; the acting copy is refreshed from it.
Argmax over bf16 Q-values can differ from float32 only where two actions' values are within bf16's
rounding, which epsilon-greedy acting does not notice.

On a GPU (collectors.act_device cuda) nothing is timed: bf16 where the GPU has bf16 units (auto),
channels-last for the Nature CNN, no trace; each step's observations go through one pinned staging
buffer, one host-to-device copy, one forward, and the actions come back as one small copy.
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import torch
from torch import nn

from raypex.actors.device_errors import NoGpuHere
from raypex.learner.networks import acting_copy, greedy_actions, refresh_acting_copy
from raypex.learner.weights import load_arrays
from raypex.replay.contracts import Weights

ACT_PRECISIONS = ("auto", "fp32", "bf16")
ACT_FUSIONS = ("auto", "on", "off")
AUTO_MIN_GAIN = 1.1  # a faster form must win by at least this much to be chosen: a tie keeps the plain one
TIMING_REPEATS = 7
_EVICTION_BYTES = 32 << 20  # touched before each timed forward: beyond this box's L2 and its share of L3


class ActingPolicy:
    """Greedy actions from a float32 Q-network or its bf16 acting copy, whichever `precision` says,
    run eagerly or as a oneDNN-fused trace, whichever `fusion` says."""

    def __init__(self, network: nn.Module, precision: str, example_obs: np.ndarray, fusion: str = "off",
                 device: str = "cpu"):
        if precision not in ACT_PRECISIONS:
            raise ValueError(f"act precision {precision!r}: one of {', '.join(ACT_PRECISIONS)}")
        if fusion not in ACT_FUSIONS:
            raise ValueError(f"act fusion {fusion!r}: one of {', '.join(ACT_FUSIONS)}")
        self.device = torch.device(device)
        self.network = network.eval()
        self.fast: nn.Module | None = None
        self.fused: torch.jit.ScriptModule | None = None
        self.timings_ms: dict[str, float] = {}
        self._staging: torch.Tensor | None = None  # pinned host copy of one step's observations (GPU acting)
        if self.device.type != "cpu":
            self._place_on_gpu(precision, example_obs)
            return
        obs = torch.from_numpy(np.ascontiguousarray(example_obs))
        if precision == "bf16":
            self.fast = acting_copy(network, torch.bfloat16)
        elif precision == "auto":
            self.fast = self._bf16_if_faster(obs)
        self.precision = "bf16" if self.fast is not None else "fp32"
        if fusion == "on":
            self.fused = fused_trace(self.fast or self.network, obs)
        elif fusion == "auto" and obs.dim() == 4:
            self.fused = self._fused_if_faster(obs)

    def _place_on_gpu(self, precision: str, example_obs: np.ndarray) -> None:
        if not torch.cuda.is_available():
            raise NoGpuHere(f"collectors.act_device cuda: this collector's process sees no GPU "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
        self.network = self.network.to(self.device)
        if precision == "bf16" or (precision == "auto" and torch.cuda.is_bf16_supported()):
            self.fast = acting_copy(self.network, torch.bfloat16)
        self.precision = "bf16" if self.fast is not None else "fp32"
        acting = self._acting()
        if hasattr(acting, "use_channels_last"):
            acting.use_channels_last(True)
        self._staging = torch.empty(example_obs.shape, dtype=torch.from_numpy(example_obs[:0]).dtype, pin_memory=True)

    def _bf16_if_faster(self, obs: torch.Tensor) -> nn.Module | None:
        candidate = acting_copy(self.network, torch.bfloat16)
        self.timings_ms.update(fp32=_median_forward_ms(self.network, obs), bf16=_median_forward_ms(candidate, obs))
        return candidate if self.timings_ms["fp32"] >= AUTO_MIN_GAIN * self.timings_ms["bf16"] else None

    def _fused_if_faster(self, obs: torch.Tensor) -> torch.jit.ScriptModule | None:
        eager = self.fast or self.network
        try:
            candidate = fused_trace(eager, obs)
        except Exception:  # noqa: BLE001 - a torch without a working tracer acts eagerly
            return None
        self.timings_ms.update(eager=_median_forward_ms(eager, obs), fused=_median_forward_ms(candidate, obs))
        return candidate if self.timings_ms["eager"] >= AUTO_MIN_GAIN * self.timings_ms["fused"] else None

    @property
    def form(self) -> str:
        """What acts, in words: the dtype, whether the forward is oneDNN-fused, and the GPU if on one."""
        if self.device.type != "cpu":
            return f"{self.precision}, {self.device.type}"
        return f"{self.precision}, fused" if self.fused is not None else self.precision

    def _acting(self):
        return self.fused or self.fast or self.network

    def load(self, weights: Weights) -> None:
        """Take published weights (float32 arrays) and refresh the acting copy from them (the fused
        trace reads the same parameter tensors)."""
        load_arrays(self.network, weights.arrays)
        if self.fast is not None:
            refresh_acting_copy(self.fast, self.network)

    def _on_device(self, obs: np.ndarray) -> torch.Tensor:
        """`obs` where the acting network is: as it is on the CPU; on a GPU through the pinned
        staging buffer (the copy is asynchronous; reading the result back waits for it)."""
        batch = torch.from_numpy(obs)
        if self._staging is None:
            return batch
        if batch.shape != self._staging.shape:
            return batch.to(self.device)
        self._staging.copy_(batch)
        return self._staging.to(self.device, non_blocking=True)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q(obs, .) as float32 numpy [N, A], from the network actions are chosen with."""
        with torch.inference_mode():
            return self._acting()(self._on_device(obs)).float().cpu().numpy()

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """argmax_a Q(obs, a) for a numpy batch, without autograd."""
        if self._staging is None:
            return greedy_actions(self._acting(), obs)
        with torch.inference_mode():
            return self._acting()(self._on_device(obs)).argmax(dim=1).cpu().numpy()


def fused_trace(network: nn.Module, example_obs: torch.Tensor) -> torch.jit.ScriptModule:
    """`network` traced on `example_obs` with oneDNN Graph fusion on (a process-wide switch that
    only traced modules read), warmed up so that the fused kernels are built before acting."""
    torch.jit.enable_onednn_fusion(True)
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.trace's, on every call
        traced = torch.jit.trace(network, example_obs, check_trace=False)
        for _ in range(3):  # the profiling executor specializes, then fuses, on these calls
            traced(example_obs)
    return traced


def _median_forward_ms(network: nn.Module, obs: torch.Tensor) -> float:
    """The median time of one forward of `network` on `obs` (median_call_ms)."""
    with torch.inference_mode():
        return median_call_ms(lambda: network(obs))


def median_call_ms(call) -> float:
    """The median time of `call()` (median_calls_ms)."""
    return median_calls_ms([call])[0]


def median_calls_ms(calls: list) -> list[float]:
    """The median time of each of `calls`, after two warm-up rounds, the calls taken in turn within
    each round (a machine busy for a while then slows each alike, where one timed after the other
    once made Pong's slower acting form look the faster on a loaded box), each with the CPU caches
    evicted as an env step between two forwards leaves them: timed hot, the fused fp32 Nature CNN
    looked 1.15x faster and ran slower in a collector (1.07x evicted)."""
    times: list[list[float]] = [[] for _ in calls]
    eviction = np.zeros(_EVICTION_BYTES, np.uint8)  # freed on return: collectors do not keep it
    for i in range(TIMING_REPEATS + 2):
        for call, taken in zip(calls, times):
            eviction[::64] += 1  # one byte per cache line, beyond the caches' size
            start = time.perf_counter()
            call()
            if i >= 2:
                taken.append((time.perf_counter() - start) * 1e3)
    return [float(np.median(taken)) for taken in times]

