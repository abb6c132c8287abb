"""The Weights message (learner -> collectors): a version number and the network's parameters.

Weights travel as a dict of float32 numpy arrays, so Ray's object store hands collectors a
zero-copy view and collectors never need to unpickle tensors. A version only goes up; collectors
load a version only when it is newer than the one they act with.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class Weights:
    """One published version of the Q-network parameters."""

    version: int
    arrays: dict[str, np.ndarray]


def export_arrays(module: nn.Module) -> dict[str, np.ndarray]:
    """The module's state as CPU float32 numpy arrays (fresh copies, safe to publish)."""
    return {name: t.detach().to("cpu", torch.float32).numpy().copy() for name, t in module.state_dict().items()}


def load_arrays(module: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    """Copy published arrays into `module`'s parameters in place."""
    with torch.no_grad(), warnings.catch_warnings():
        # Object-store arrays are read-only views; we only read them, so torch's warning is noise.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for name, tensor in module.state_dict().items():
            tensor.copy_(torch.from_numpy(np.asarray(arrays[name])))
