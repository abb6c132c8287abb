"""EnvStepper: a collector's vector env, stepped once per call: each step checked (actors/step_check.py),
its episodes' returns and lengths counted, and how long the running step has been running readable
from another thread (the hang watchers of both runtimes).

The collector's other parts are its policy (actors/policy.py) and its adder (actors/adders.py,
actors/sequence_adder.py): the stepper knows neither.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from raypex.actors.envs import make_vector_env
from raypex.actors.step_check import StepCheck


class EnvStepper:
    """One vector env of `num_envs` copies, made and reset with `seed`; `who` names it in a fault's line."""

    def __init__(self, env_id: str, num_envs: int, env_kwargs: dict, frame_stack: int, seed: int, who: str,
                 wrappers: tuple = ()):
        self.env = make_vector_env(env_id, num_envs, env_kwargs, max(frame_stack, 1), wrappers)
        self.obs, self.reset_info = self.env.reset(seed=seed)
        self.ready_at = time.time()  # wall clock: the env made and reset (start-up's moments)
        self.check = StepCheck(env_id, self.obs, who)
        self.step_started: float | None = None  # perf_counter() when the step running now began
        self.first_step_at: float | None = None  # wall clock of the first step (start-up's end)
        self.episode_return = np.zeros(num_envs, np.float64)
        self.episode_length = np.zeros(num_envs, np.int64)
        self._episodes_lock = threading.Lock()  # finished_episodes may be called from another thread
        self._returns: list[float] = []
        self._lengths: list[int] = []

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """One step of every env: (next_obs, reward, terminated, truncated, info), checked; a fault
        (EnvWentBad) names the env, the step and what was wrong. `obs` becomes next_obs."""
        self.step_started = time.perf_counter()
        try:
            next_obs, reward, terminated, truncated, info = self.env.step(actions)
        except ValueError as err:  # a vector env that could not stack an observation of another shape
            raise self.check.explain(self.env, err, self.episode_length) or err
        self.step_started = None
        self.check(next_obs, reward, self.episode_length)
        if self.first_step_at is None:
            self.first_step_at = time.time()
        self.obs = next_obs
        return next_obs, reward, terminated, truncated, info

    def count_episodes(self, reward: np.ndarray, done: np.ndarray, real: np.ndarray) -> None:
        """Add a step to each env's episode; `real`: the envs whose step was part of an episode (not
        an autoreset step); `done`: whose episode it ended."""
        self.episode_return += np.where(real, reward, 0.0)
        self.episode_length += real
        done = done & real
        if done.any():
            with self._episodes_lock:
                self._returns.extend(self.episode_return[done].tolist())
                self._lengths.extend(self.episode_length[done].tolist())
            self.episode_return[done] = 0.0
            self.episode_length[done] = 0

    def finished_episodes(self) -> tuple[list[float], list[int]]:
        """The returns and lengths of the episodes finished since the last call (drained)."""
        with self._episodes_lock:
            returns, lengths = self._returns, self._lengths
            self._returns, self._lengths = [], []
        return returns, lengths

    def running_s(self) -> float:
        """How long the step running now has been running (0 between steps)."""
        started = self.step_started  # read once: the stepping thread clears it
        return 0.0 if started is None else time.perf_counter() - started

    def close(self) -> None:
        self.env.close()
