"""RecurrentActingPolicy: a collector's acting with r2d2's recurrent Q-network, in numpy.

Each env carries its recurrent state from step to step; the collector starts it again (zeros) at
each env's episode start (`start_episodes`) and reads it before a step (`state`): the adder stores
it at every sequence's first step, so the learner unrolls from where the collector was. Until the
learner's first weights arrive it acts uniformly at random, its state staying at zeros.
"""

from __future__ import annotations

import numpy as np

from raypex.learner.numpy_recurrent import NumpyRecurrentQ


class RecurrentActingPolicy:
    """Greedy actions of the published recurrent weights, one state per env (ActingPolicy's interface)."""

    precision = "fp32"
    form = "numpy"

    def __init__(self, num_actions: int, num_envs: int, recurrent_size: int, rng: np.random.Generator):
        self.num_actions, self.rng = num_actions, rng
        self.network: NumpyRecurrentQ | None = None
        self.state = np.zeros((num_envs, 2 * recurrent_size), np.float32)  # h and c of each env, before its next step

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Act with these weights from the next step on (each env's state carries over)."""
        self.network = NumpyRecurrentQ(arrays)

    def start_episodes(self, starting: np.ndarray) -> None:
        """Envs whose next observation is an episode's first start from the initial state."""
        self.state[starting] = 0.0

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """[E, num_actions] Q-values of this step, advancing every env's state; zeros before the first weights."""
        if self.network is None:
            return np.zeros((len(obs), self.num_actions), np.float32)
        q, self.state = self.network.step(obs, self.state)
        return q

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The greedy action per env (advancing its state); uniformly random before the first weights."""
        if self.network is None:
            return self.rng.integers(0, self.num_actions, len(obs))
        return self.q_values(obs).argmax(axis=1)
