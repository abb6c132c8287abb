"""The MLP Q-network's forward pass in numpy, for greedy evaluation without torch.

The evaluator only ever runs the MLP forward on published weights. Doing that in numpy spares its
process the torch import (1.4 s of CPU at start-up, on the same cores the learner is warming up
on) and costs about a third of torch's per-call overhead for a network this small. It reads the
same Weights arrays as `MLPQNetwork` (its state-dict names) and a test keeps the two equal.
Convolutional networks are evaluated with torch.
"""

from __future__ import annotations

import numpy as np


class NumpyMLPQ:
    """Q-values of `MLPQNetwork` for weights given as its state-dict arrays."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        hidden_names = sorted({name.rsplit(".", 1)[0] for name in arrays if name.startswith("torso.")},
                              key=lambda prefix: int(prefix.split(".")[1]))
        # Transposed once here so every call is obs @ W.
        self.hidden = [(np.ascontiguousarray(arrays[f"{p}.weight"].T), arrays[f"{p}.bias"]) for p in hidden_names]
        self.advantage = (np.ascontiguousarray(arrays["advantage.weight"].T), arrays["advantage.bias"])
        self.value = ((np.ascontiguousarray(arrays["value.weight"].T), arrays["value.bias"])
                      if "value.weight" in arrays else None)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """[B, obs_dim] observations -> [B, num_actions] float32 Q-values."""
        features = np.asarray(obs, np.float32)
        for weight, bias in self.hidden:
            features = np.maximum(features @ weight + bias, 0.0)
        advantage = features @ self.advantage[0] + self.advantage[1]
        if self.value is None:
            return advantage
        value = features @ self.value[0] + self.value[1]
        return value + advantage - advantage.mean(axis=1, keepdims=True)

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        """argmax_a Q(obs, a) for every row."""
        return self.q_values(obs).argmax(axis=1)
