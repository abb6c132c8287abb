"""NumpyActingPolicy: a collector's MLP acting in numpy, so its process never imports torch.

For flat observations the acting network is a small MLP. Its forward in numpy (learner/numpy_mlp.py,
the evaluator's too) costs less per call than torch's at a collector's batch of envs. The gain is at
start-up: a torch import is about a second of CPU. On a 2-core laptop, four processes importing
torch at once held the first env step and the learner's first update until 7 s after
`raypex train`.

Until the learner's first weights arrive, the policy has no network. It acts uniformly at random:
the replay warm-up. Its Q-values are then zeros, so initial priorities come from rewards alone.
Epsilon starts at 1, so a collector acting with its own random network chose at random too.
"""

from __future__ import annotations

import numpy as np

from raypex.learner.numpy_mlp import NumpyMLPQ


class NumpyActingPolicy:
    """Greedy actions and Q-values of the published MLP weights, in numpy (ActingPolicy's interface)."""

    precision = "fp32"
    form = "numpy"

    def __init__(self, num_actions: int, rng: np.random.Generator):
        self.num_actions = num_actions
        self.rng = rng
        self.network: NumpyMLPQ | None = None  # none until the first weights arrive

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Act with these weights from now on (MLPQNetwork's state-dict arrays)."""
        self.network = NumpyMLPQ(arrays)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """[B, num_actions] float32 Q-values; zeros before the first weights."""
        if self.network is None:
            return np.zeros((len(obs), self.num_actions), np.float32)
        return self.network.q_values(obs)

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The greedy action per row; uniformly random before the first weights."""
        if self.network is None:
            return self.rng.integers(0, self.num_actions, len(obs))
        return self.network.greedy_actions(obs)


def acts_in_numpy(obs_shape: tuple[int, ...], act_precision: str, act_fusion: str) -> bool:
    """Whether a collector acts with NumpyActingPolicy: flat observations, with no bf16 or fused
    torch form asked for explicitly."""
    return len(obs_shape) == 1 and act_precision in ("auto", "fp32") and act_fusion != "on"
