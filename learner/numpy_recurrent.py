"""RecurrentQNetwork's step in numpy (learner/recurrent_networks.py), for collectors and the
evaluator acting with r2d2's published weights without importing torch.

The state is one array per env, h and c side by side ([B, 2 x recurrent_size]): the form replay
stores with each sequence and the learner splits again. A test keeps this equal to the torch step.
"""

from __future__ import annotations

import numpy as np

from raypex.learner.numpy_mlp import linear_layer, torso_forward, torso_layers


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # no overflow for large |x|


class NumpyRecurrentQ:
    """One step of the recurrent Q-network for weights given as its state-dict arrays."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.torso = torso_layers(arrays)
        self.feedforward = linear_layer(arrays, "core") if "core.weight" in arrays else None  # network.core mlp
        if self.feedforward is None:
            self.input_weight = np.ascontiguousarray(arrays["core.weight_ih"].T)
            self.hidden_weight = np.ascontiguousarray(arrays["core.weight_hh"].T)
            self.bias = arrays["core.bias_ih"] + arrays["core.bias_hh"]
        self.recurrent_size = arrays["advantage.weight"].shape[1]
        self.advantage = linear_layer(arrays, "advantage")
        self.value = linear_layer(arrays, "value") if "value.weight" in arrays else None

    def step(self, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(obs [B, obs_dim], state [B, 2R]) -> (Q-values [B, A], the next state [B, 2R])."""
        h, c = state[:, :self.recurrent_size], state[:, self.recurrent_size:]
        features = torso_forward(self.torso, obs)
        if self.feedforward is not None:  # no memory: the state passes through
            h = np.maximum(features @ self.feedforward[0] + self.feedforward[1], 0.0)
        else:
            gates = features @ self.input_weight + h @ self.hidden_weight + self.bias
            i, f, g, o = np.split(gates, 4, axis=1)  # torch's LSTMCell order
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
        advantage = h @ self.advantage[0] + self.advantage[1]
        q = advantage if self.value is None else (
            h @ self.value[0] + self.value[1] + advantage - advantage.mean(axis=1, keepdims=True))
        return q.astype(np.float32), np.concatenate([h, c], axis=1).astype(np.float32)
