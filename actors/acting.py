"""ActingPolicy: the collector's Q-network for choosing actions, in the precision this CPU runs fastest.

On a CPU with native bf16 matrix units (AVX512-BF16, AMX) a bf16 copy of the Nature CNN chooses
actions 2-2.5x faster than float32 (BENCHMARKS.md, "Collectors at the emulator's speed"); on
others bf16 is emulated and slower. `precision="auto"` therefore times both on the collector's own
batch shape when the collector starts and keeps the faster, so the same config is right on a
laptop and on a GPU box's cores. Published weights always land in the float32 network first; the
acting copy is refreshed from it. Argmax over bf16 Q-values can differ from float32 only where
two actions' values are within bf16's rounding, which epsilon-greedy acting does not notice.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from learner.networks import acting_copy, greedy_actions, refresh_acting_copy
from learner.weights import load_arrays

ACT_PRECISIONS = ("auto", "fp32", "bf16")
AUTO_MIN_GAIN = 1.1  # bf16 must be at least this much faster to be chosen: a tie keeps float32
TIMING_REPEATS = 7


class ActingPolicy:
    """Greedy actions from a float32 Q-network or its bf16 acting copy, whichever `precision` says."""

    def __init__(self, network: nn.Module, precision: str, example_obs: np.ndarray):
        if precision not in ACT_PRECISIONS:
            raise ValueError(f"act precision {precision!r}: one of {', '.join(ACT_PRECISIONS)}")
        self.network = network.eval()
        self.fast: nn.Module | None = None
        self.timings_ms: dict[str, float] = {}
        if precision == "bf16":
            self.fast = acting_copy(network, torch.bfloat16)
        elif precision == "auto":
            self.fast = self._bf16_if_faster(example_obs)
        self.precision = "bf16" if self.fast is not None else "fp32"

    def _bf16_if_faster(self, example_obs: np.ndarray) -> nn.Module | None:
        candidate = acting_copy(self.network, torch.bfloat16)
        obs = torch.from_numpy(np.ascontiguousarray(example_obs))
        self.timings_ms = {"fp32": _median_forward_ms(self.network, obs),
                           "bf16": _median_forward_ms(candidate, obs)}
        return candidate if self.timings_ms["fp32"] >= AUTO_MIN_GAIN * self.timings_ms["bf16"] else None

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Take published weights (float32 arrays) and refresh the acting copy from them."""
        load_arrays(self.network, arrays)
        if self.fast is not None:
            refresh_acting_copy(self.fast, self.network)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q(obs, .) as float32 numpy [N, A], from the network actions are chosen with."""
        with torch.inference_mode():
            return (self.fast or self.network)(torch.from_numpy(obs)).float().numpy()

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """argmax_a Q(obs, a) for a numpy batch, without autograd."""
        return greedy_actions(self.fast or self.network, obs)


def _median_forward_ms(network: nn.Module, obs: torch.Tensor) -> float:
    """The median time of one forward of `network` on `obs`, after two warm-up calls."""
    times = []
    with torch.inference_mode():
        for i in range(TIMING_REPEATS + 2):
            start = time.perf_counter()
            network(obs)
            if i >= 2:
                times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))
