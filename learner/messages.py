"""The Weights message (learner -> collectors): a version number and the network's parameters.

Weights travel as a dict of float32 numpy arrays, so Ray's object store hands collectors a
zero-copy view and collectors never unpickle tensors. Versions only go up; a collector loads a
version only when it is newer than the one it acts with. (torch-free, so the driver and the Ray
adapters can name it without importing torch.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Weights:
    """One published version of the Q-network parameters."""

    version: int
    arrays: dict[str, np.ndarray]


class TrainingStopped(Exception):
    """Raised by a batch source that stops waiting for data because the run is ending."""
