"""The acting graph: what collectors and the evaluator run of the published network, as an ONNX
graph derived from the plug-in's own torch module, so no acting network is written twice.

The learner exports it once and sends it with every published Weights. Its parameters are not
inside: they are named inputs, named as the published arrays are (the network's state-dict names),
so each new version is a new feed of the same graph (actors/onnx_acting.py runs it with ONNX
Runtime). The graph of a small MLP is about 1.5 kB and a process that acts with it never imports
torch: ONNX Runtime imports in 0.1 s where torch takes over a second, and on a collector's batch
its call costs what a hand-written numpy forward did (50 us for CartPole's MLP over 16 envs) and
less than eager torch's (70 us). On CNNs neither wins everywhere (MinAtar's: 120-200 us against
torch's fused 250-300 us; Pong's Nature CNN: 7.2-7.6 ms against 5.3-5.6 ms), so a CNN's collector
times both (actors/q_policy.py).

Its inputs are `obs` [batch, *obs_shape] of the observations' dtype (observations in parts: an
`obs.<key>` input per part, replay/contracts.py) and, for a plug-in whose acting module keeps a
recurrent state, `state` [batch, state_size]; its outputs are the plug-in's `acting_outputs`, in
order (learner/algorithms/registry.py).
"""

from __future__ import annotations

import copy
import io
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from raypex.replay.contracts import fields

OPSET = 17  # what ONNX Runtime has run every operator of these networks with for years
EXAMPLE_BATCH = 2  # the batch dimension is free; the trace needs some size other than 1


def parameter_names(module: nn.Module, network: nn.Module) -> list[str]:
    """The published name of each of `module`'s parameters and buffers, in the order torch's
    exporter makes them graph inputs (the module's state dict, each tensor once). An acting module
    that holds a tensor the network does not would be fed nothing: refused in one line."""
    published = {id(tensor): name for name, tensor in network.state_dict(keep_vars=True).items()}
    names, seen = [], set()
    for name, tensor in module.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        if id(tensor) not in published:
            raise ValueError(f"the acting module's {name} is not a tensor of the published network; an acting "
                             "module must hold only the network's own parameters and buffers")
        names.append(published[id(tensor)])
    return names


@contextmanager
def without_onnxscript_functions() -> Iterator[None]:
    """torch's TorchScript-based exporter ends every export by importing the onnx package, only to
    add the onnxscript functions a graph calls. An acting graph calls none, and that import (onnx
    imports ml_dtypes) held the learner's first update back by 0.6 s of a CartPole run's start.
    The step is skipped where torch has it under this name; elsewhere the export is only slower."""
    try:
        from torch.onnx._internal.torchscript_exporter import onnx_proto_utils
    except ImportError:
        onnx_proto_utils = None
    original = getattr(onnx_proto_utils, "_add_onnxscript_fn", None)
    if original is None:
        yield
        return
    onnx_proto_utils._add_onnxscript_fn = lambda model_bytes, custom_opsets: model_bytes
    try:
        yield
    finally:
        onnx_proto_utils._add_onnxscript_fn = original


class PartsInput(nn.Module):
    """An acting module that takes observations in parts, called with one tensor per part in the
    parts' order (what an exporter's positional inputs are) and any further inputs after them."""

    def __init__(self, module: nn.Module, keys: list[str]):
        super().__init__()
        self.module, self.keys = module, keys

    def forward(self, *inputs: torch.Tensor):
        parts = dict(zip(self.keys, inputs[:len(self.keys)], strict=True))
        return self.module(parts, *inputs[len(self.keys):])

    @property
    def state_size(self) -> int:
        return self.module.state_size


def export_acting_graph(plugin, policy: nn.Module, obs_shape: tuple[int, ...], obs_dtype: str,
                        parts: tuple = ()) -> bytes:
    """The ONNX bytes of `plugin`'s acting module (an Algorithm's `acting_module`) over a CPU float32
    copy of `policy`, the network the learner publishes; `parts`: (key, shape, dtype) of each part
    of observations in parts."""
    network = copy.deepcopy(policy).to("cpu").float().eval().requires_grad_(False)
    module = plugin.acting_module(network)
    inputs, outputs = list(plugin.acting_inputs), list(plugin.acting_outputs)
    if parts:
        module = PartsInput(module, [key for key, _, _ in parts])
        example = [torch.zeros((EXAMPLE_BATCH, *shape), dtype=getattr(torch, dtype)) for _, shape, dtype in parts]
        inputs = [*fields("obs", {key: None for key, _, _ in parts}), *inputs[1:]]
    else:
        example = [torch.zeros((EXAMPLE_BATCH, *obs_shape), dtype=getattr(torch, obs_dtype))]
    if "state" in inputs:
        example.append(torch.zeros((EXAMPLE_BATCH, module.state_size)))
    buffer = io.BytesIO()
    with warnings.catch_warnings(), without_onnxscript_functions():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter warns of its own deprecation on every call
        # Parameters as named inputs, not folded into constants: one graph serves every version.
        torch.onnx.export(module, tuple(example), buffer, input_names=inputs + parameter_names(module, network),
                          output_names=outputs, dynamic_axes={name: {0: "batch"} for name in inputs + outputs},
                          opset_version=OPSET, dynamo=False, export_params=False, keep_initializers_as_inputs=True,
                          do_constant_folding=False)
    return buffer.getvalue()
