"""Converting a network's parameters to and from the arrays of a Weights message."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn


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
