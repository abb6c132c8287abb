"""The MLP Q-network's forward pass in numpy, for greedy evaluation without torch (and the
continuous actor's, NumpyMLPActor, for TD3 and SAC).

The evaluator only ever runs the MLP forward on published weights. Doing that in numpy spares its
process the torch import (1.4 s of CPU at start-up, on the same cores the learner is warming up
on) and costs about a third of torch's per-call overhead for a network this small. It reads the
same Weights arrays as `MLPQNetwork` (its state-dict names) and a test keeps the two equal.
Convolutional networks are evaluated with torch.
"""

from __future__ import annotations

import numpy as np

# network.obs_norm (learner/obs_norm.py): normalized observations are (obs - mean) / sqrt(var + NORM_EPS),
# clipped to +-NORM_CLIP; here so that this torch-free module and the torch one apply the same
NORM_EPS = 1e-8
NORM_CLIP = 10.0
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which learner/networks.py uses
AVG_L1_EPS = 1e-8  # network.sale's AvgL1Norm (learner/sale.py) divides by at least this


def linear_layer(arrays: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    """(W transposed, bias) of layer `name`: transposed once here so every call is x @ W."""
    return np.ascontiguousarray(arrays[f"{name}.weight"].T), arrays[f"{name}.bias"]


def torso_layers(arrays: dict[str, np.ndarray], prefix: str = "torso.") -> list[tuple[np.ndarray, np.ndarray]]:
    """The `{prefix}N` Linear layers of a state dict (a Sequential's), in order of N."""
    names = sorted({name.rsplit(".", 1)[0] for name in arrays if name.startswith(prefix)},
                   key=lambda layer: int(layer.rsplit(".", 1)[1]))
    return [linear_layer(arrays, name) for name in names]


def layer_norms(arrays: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """The (scale, shift) of each hidden layer's LayerNorm (`norms.N`), or None without them."""
    if "norms.0.weight" not in arrays:
        return None
    count = len({name for name in arrays if name.startswith("norms.")}) // 2
    return [(arrays[f"norms.{i}.weight"], arrays[f"norms.{i}.bias"]) for i in range(count)]


def torso_forward(layers: list[tuple[np.ndarray, np.ndarray]], obs: np.ndarray,
                  norms: list[tuple[np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
    """ReLU(x @ W + b) through every torso layer, in float32, each pre-activation layer-normalized
    first when `norms` are given (torch's LayerNorm: biased variance, eps LAYER_NORM_EPS)."""
    features = np.asarray(obs, np.float32)
    for i, (weight, bias) in enumerate(layers):
        features = features @ weight + bias
        if norms is not None:
            mean = features.mean(axis=-1, keepdims=True)
            var = features.var(axis=-1, keepdims=True)
            features = (features - mean) / np.sqrt(var + LAYER_NORM_EPS) * norms[i][0] + norms[i][1]
        features = np.maximum(features, 0.0)
    return features


class NumpyMLPQ:
    """Q-values of `MLPQNetwork` for weights given as its state-dict arrays."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.hidden = torso_layers(arrays)
        self.norms = layer_norms(arrays)
        self.advantage = linear_layer(arrays, "advantage")
        self.value = linear_layer(arrays, "value") if "value.weight" in arrays else None

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """[B, obs_dim] observations -> [B, num_actions] float32 Q-values."""
        features = torso_forward(self.hidden, obs, self.norms)
        advantage = features @ self.advantage[0] + self.advantage[1]
        if self.value is None:
            return advantage
        value = features @ self.value[0] + self.value[1]
        return value + advantage - advantage.mean(axis=1, keepdims=True)

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        """argmax_a Q(obs, a) for every row."""
        return self.q_values(obs).argmax(axis=1)


class NumpyMLPActor:
    """The deterministic action of `ActorNetwork` on flat observations
    (learner/actor_critic_networks.py), tanh(mean) in [-1, 1], and SAC's sampled action, for
    weights given as its state-dict arrays."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.hidden = torso_layers(arrays)
        self.mean = linear_layer(arrays, "mean")
        self.log_std = linear_layer(arrays, "log_std") if "log_std.weight" in arrays else None
        self.norm = None  # network.obs_norm: (mean, 1 / std) of learner/obs_norm.py's RunningObsNorm
        if "encoder.mean" in arrays:
            scale = 1.0 / np.sqrt(np.asarray(arrays["encoder.var"], np.float32) + NORM_EPS)
            self.norm = (np.asarray(arrays["encoder.mean"], np.float32), scale.astype(np.float32))
        self.sale = None  # network.sale: the projection and the state embedding's ELU layers (learner/sale.py)
        if "encoder.project.weight" in arrays:
            self.sale = (linear_layer(arrays, "encoder.project"),
                         torso_layers(arrays, "encoder.embedding.layers."))

    def _features(self, obs: np.ndarray) -> np.ndarray:
        if self.norm is not None:
            obs = np.clip((np.asarray(obs, np.float32) - self.norm[0]) * self.norm[1], -NORM_CLIP, NORM_CLIP)
        if self.sale is not None:
            obs = self._sale_input(np.asarray(obs, np.float32))
        return torso_forward(self.hidden, obs)

    def _sale_input(self, obs: np.ndarray) -> np.ndarray:
        """[AvgL1Norm(W obs), zs], as learner/sale.py SaleActorInput."""
        (weight, bias), embedding = self.sale
        zs = obs
        for i, (layer_weight, layer_bias) in enumerate(embedding):
            zs = zs @ layer_weight + layer_bias
            if i < len(embedding) - 1:
                zs = np.where(zs > 0, zs, np.expm1(np.minimum(zs, 0.0)))  # ELU
        return np.concatenate([avg_l1_norm(obs @ weight + bias), avg_l1_norm(zs)], axis=-1)

    def actions(self, obs: np.ndarray) -> np.ndarray:
        """[B, obs_dim] -> [B, action_dim] deterministic actions in [-1, 1]."""
        return np.tanh(self._features(obs) @ self.mean[0] + self.mean[1])

    def sample(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """SAC's squashed Gaussian sample, tanh(mean + std * N(0, 1)), in [-1, 1]."""
        features = self._features(obs)
        mean = features @ self.mean[0] + self.mean[1]
        if self.log_std is None:
            raise ValueError("these actor weights have no log_std head (a TD3 actor): nothing to sample")
        log_std = squashed_log_std(features @ self.log_std[0] + self.log_std[1])
        return np.tanh(mean + np.exp(log_std) * rng.standard_normal(mean.shape).astype(np.float32))


def avg_l1_norm(x: np.ndarray) -> np.ndarray:
    """x over its mean absolute value along the last axis (learner/sale.py's AvgL1Norm)."""
    return x / np.maximum(np.abs(x).mean(axis=-1, keepdims=True), AVG_L1_EPS)


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # SAC's log standard deviation, squashed into this range


def squashed_log_std(raw):
    """The log std head's raw output mapped smoothly into [LOG_STD_MIN, LOG_STD_MAX] (numpy or torch)."""
    tanh = np.tanh(raw) if isinstance(raw, np.ndarray) else raw.tanh()
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (tanh + 1.0)
