"""policy.pt2 as an ONNX model, for serving a policy without torch (`raypex export RUN --onnx PATH`).

The model is the batch program of policy.pt2 (learner/policy_file.py), traced by torch's ONNX
exporter, with the same inputs and outputs under these names, the batch dimension free:

- a Q-network (dqn): `obs` [batch, *obs_shape] float32 -> `q_values` [batch, actions] (observations
  in parts: an `obs.<key>` input per part, [batch, *part shape]);
- an actor (td3, sac): `obs` -> `actions` [batch, action_dim], in the env's units;
- a recurrent Q-network (r2d2): `obs`, `state` [batch, state_size] -> `q_values`, `state_out`
  (the state to pass with the next observation; zeros at an episode's start).

The greedy action of a Q-network is the argmax of its Q-values, as policy.pt2's `act`.
"""

from __future__ import annotations

import io
import warnings

import torch
from torch import nn

from raypex.learner.acting_graph import OPSET
from raypex.learner.policy_file import RECURRENT, ExportedPolicy
from raypex.replay.contracts import fields


class _Program(nn.Module):
    """An exported program's module seen as a plain one by the exporter, which switches a model to
    eval mode (an exported program refuses `train`) and would make its weights constants of the
    trace (they are already fixed)."""

    def __init__(self, program: nn.Module, keys: list[str] | None = None):
        """`keys`: the program takes observations in parts, given here one input per part in this order."""
        super().__init__()
        self.keys = keys
        for parameter in program.parameters():
            parameter.requires_grad_(False)
        object.__setattr__(self, "program", program)  # not a submodule: `train` must not reach it

    def train(self, mode: bool = True) -> _Program:
        return self

    def forward(self, *inputs: torch.Tensor):
        if self.keys is None:
            return self.program(*inputs)
        return self.program(dict(zip(self.keys, inputs[:len(self.keys)], strict=True)), *inputs[len(self.keys):])


def io_names(policy: ExportedPolicy) -> tuple[list[str], list[str]]:
    """The model's input and output names for this policy."""
    obs = list(fields("obs", policy.obs_shape)) if isinstance(policy.obs_shape, dict) else ["obs"]
    if policy.outputs == RECURRENT:
        return [*obs, "state"], ["q_values", "state_out"]
    return obs, ["actions" if policy.outputs == "actions" else "q_values"]


def onnx_bytes(policy: ExportedPolicy) -> bytes:
    """The ONNX model of a loaded policy.pt2 (see the module's docstring)."""
    inputs, outputs = io_names(policy)
    parts = isinstance(policy.obs_shape, dict)
    shapes = list(policy.obs_shape.values()) if parts else [policy.obs_shape]
    example = [torch.zeros((2, *shape)) for shape in shapes]
    if policy.recurrent:
        example.append(torch.zeros((2, policy.state_size)))
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript-based exporter warns of its own deprecation on every call
        warnings.simplefilter("ignore")
        torch.onnx.export(_Program(policy._batched, list(policy.obs_shape) if parts else None), tuple(example), buffer, input_names=inputs, output_names=outputs,
                          dynamic_axes={name: {0: "batch"} for name in inputs + outputs}, opset_version=OPSET,
                          dynamo=False)
    return buffer.getvalue()
