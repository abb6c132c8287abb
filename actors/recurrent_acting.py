"""RecurrentActingPolicy: a collector's acting with r2d2's recurrent Q-network, in numpy (torch on
its CPU for images).

Each env carries its recurrent state from step to step; the collector starts it again (zeros) at
each env's episode start (`start_episodes`) and reads it before a step (`state`): the adder stores
it at every sequence's first step, so the learner unrolls from where the collector was. Until the
learner's first weights arrive it acts uniformly at random, its state staying at zeros.
"""

from __future__ import annotations

import numpy as np

from raypex.learner.numpy_recurrent import NumpyRecurrentQ


def recurrent_stepper(obs_shape: tuple[int, ...], obs_dtype: str, arrays: dict, previous=None):
    """What steps the recurrent network of published `arrays`: numpy for flat observations, torch
    on this process's CPU for images (`previous`, a torch stepper, takes the new weights in place)."""
    if len(obs_shape) == 1:
        return NumpyRecurrentQ(arrays)
    if previous is not None:
        return previous.load(arrays)
    import torch

    from raypex.learner.recurrent_networks import TorchRecurrentStep

    torch.set_num_threads(1)
    return TorchRecurrentStep(tuple(obs_shape), obs_dtype, arrays)


class RecurrentActingPolicy:
    """Greedy actions of the published recurrent weights, one state per env (ActingPolicy's interface)."""

    precision = "fp32"

    def __init__(self, num_actions: int, num_envs: int, recurrent_size: int, rng: np.random.Generator,
                 obs_shape: tuple[int, ...] = (), obs_dtype: str = "float32"):
        self.num_actions, self.rng = num_actions, rng
        self.obs_shape, self.obs_dtype = tuple(obs_shape), obs_dtype
        self.form = "numpy" if len(self.obs_shape) <= 1 else "torch"
        self.network = None  # a stepper (recurrent_stepper), once the first weights came
        self.state = np.zeros((num_envs, 2 * recurrent_size), np.float32)  # h and c of each env, before its next step

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Act with these weights from the next step on (each env's state carries over)."""
        self.network = recurrent_stepper(self.obs_shape, self.obs_dtype, arrays, self.network)

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
