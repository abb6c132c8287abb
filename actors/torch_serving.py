"""TorchForward: an acting server's forward on its node's GPU (collectors.acting served with
act_device cuda): the plug-in's own acting module in torch, the module the acting graph is exported
from, fed the same published arrays.

The server pads every batch to a power of two rows (actors/served_acting.py, static_rows), so it
runs a handful of shapes; on a GPU each is captured as a CUDA graph the first time it comes, and
a forward is then one copy of the inputs in, one graph launch and one copy of the outputs back.
Published weights are copied into the module's own parameter tensors, which the captured graphs
read, so a new version needs no new capture. On a CPU (tests, and a machine without a GPU) the
module runs eagerly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from raypex.actors.settings import CollectorSettings
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.weights import load_arrays
from raypex.replay.contracts import Weights

WARMUP_CALLS = 3  # run on a side stream before a capture, as torch's CUDA graph recipe asks


@dataclass
class _Captured:
    """One batch shape's CUDA graph and the tensors it reads and writes."""

    graph: torch.cuda.CUDAGraph
    inputs: dict[str, torch.Tensor]
    outputs: tuple[torch.Tensor, ...]


class TorchForward:
    """GraphForward's interface (load, run, loaded) over the plug-in's acting module in torch."""

    form = "torch"

    def __init__(self, settings: CollectorSettings, device: str):
        """`settings`: a collector's (the network's shape); `device`: "cuda" (captured) or "cpu"."""
        plugin = algorithm(settings.algo)
        self.device = torch.device(device)
        self.inputs = plugin.acting_inputs
        self.network = plugin.acting_network(settings).to(self.device).eval()
        self.module = plugin.acting_module(self.network).eval()
        self.loaded = False
        self._captured: dict[tuple, _Captured] = {}

    def load(self, weights: Weights) -> None:
        """Act with these arrays from the next call on (copied into the parameters in place)."""
        load_arrays(self.network, weights.arrays)
        self.loaded = True

    def run(self, **data: np.ndarray) -> list[np.ndarray]:
        """The module's outputs, in order, for its inputs (`obs`, and `state` where it takes one)."""
        if self.device.type != "cuda":
            with torch.inference_mode():
                return [output.numpy() for output in self._call({n: torch.from_numpy(a) for n, a in data.items()})]
        shapes = tuple((name, array.shape, array.dtype.str) for name, array in data.items())
        if shapes not in self._captured:
            self._captured[shapes] = self._capture(data)
        captured = self._captured[shapes]
        if captured is None:  # a module torch could not capture runs eagerly on the GPU
            with torch.inference_mode():
                inputs = {name: torch.from_numpy(array).to(self.device) for name, array in data.items()}
                return [output.cpu().numpy() for output in self._call(inputs)]
        for name, array in data.items():
            captured.inputs[name].copy_(torch.from_numpy(array))
        captured.graph.replay()
        return [output.cpu().numpy() for output in captured.outputs]

    def _call(self, data: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        outputs = self.module(*(data[name] for name in self.inputs))
        return tuple(outputs) if isinstance(outputs, tuple | list) else (outputs,)

    def _capture(self, data: dict[str, np.ndarray]) -> _Captured | None:
        """This batch shape's CUDA graph, or None where torch cannot capture the module (a plug-in's
        own module may call what a graph cannot hold): it then runs eagerly."""
        inputs = {name: torch.from_numpy(array).to(self.device) for name, array in data.items()}
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(WARMUP_CALLS):
                self._call(inputs)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph), torch.inference_mode():
                outputs = self._call(inputs)
        except RuntimeError:
            torch.cuda.synchronize(self.device)
            return None
        return _Captured(graph, inputs, outputs)
