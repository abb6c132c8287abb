"""EnvStepper: a collector's vector env, stepped once per call: each step checked (actors/step_check.py),
its episodes' returns and lengths counted, and how long the running step has been running readable
from another thread (the hang watchers of both runtimes).

A double-buffered collector (actors/collector.py) steps its envs in two parts, each a vector env of
half of them, one part while the other's actions are computed: `step_part`. The parts' envs are
seeded as one vector env's would be (env i with seed + i), and `obs` is always every env's.

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
    """`num_envs` copies of an env in `parts` vector envs, made and reset with `seed`; `who` names
    it in a fault's line."""

    def __init__(self, env_id: str, num_envs: int, env_kwargs: dict, frame_stack: int, seed: int, who: str,
                 parts: int = 1):
        size = num_envs // parts
        self.parts = [slice(size * p, size * (p + 1)) for p in range(parts)]
        self.envs = [make_vector_env(env_id, size, env_kwargs, max(frame_stack, 1)) for _ in range(parts)]
        resets = [env.reset(seed=seed + part.start) for env, part in zip(self.envs, self.parts)]
        self.obs = np.concatenate([obs for obs, _ in resets]) if parts > 1 else resets[0][0]
        self.reset_info = _joined([info for _, info in resets])
        self.ready_at = time.time()  # wall clock: the env made and reset (start-up's moments)
        self.check = StepCheck(env_id, self.obs.shape[1:], self.obs.dtype, who)
        self.step_started: float | None = None  # perf_counter() when the step running now began
        self.first_step_at: float | None = None  # wall clock of the first step (start-up's end)
        self.episode_return = np.zeros(num_envs, np.float64)
        self.episode_length = np.zeros(num_envs, np.int64)
        self._episodes_lock = threading.Lock()  # finished_episodes may be called from another thread
        self._returns: list[float] = []
        self._lengths: list[int] = []

    @property
    def env(self):
        """The vector env of a stepper in one part."""
        (env,) = self.envs
        return env

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """One step of every env: (next_obs, reward, terminated, truncated, info), checked; a fault
        (EnvWentBad) names the env, the step and what was wrong. `obs` becomes next_obs."""
        if len(self.envs) == 1:
            return self.step_part(0, actions)
        steps = [self.step_part(p, actions[part]) for p, part in enumerate(self.parts)]
        return (self.obs, *(np.concatenate(field) for field in list(zip(*steps))[1:4]),
                _joined([info for *_, info in steps]))

    def step_part(self, p: int, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """One step of part `p`'s envs, as `step` (its rows of `obs` become its next_obs)."""
        part, env = self.parts[p], self.envs[p]
        lengths = self.episode_length[part]
        self.step_started = time.perf_counter()
        try:
            next_obs, reward, terminated, truncated, info = env.step(actions)
        except ValueError as err:  # a vector env that could not stack an observation of another shape
            raise self.check.explain(env, err, lengths, first=part.start) or err
        self.step_started = None
        self.check(next_obs, reward, lengths, first=part.start)
        if self.first_step_at is None:
            self.first_step_at = time.time()
        if len(self.envs) == 1:
            self.obs = next_obs
        else:
            self.obs = self.obs.copy()  # the previous step's obs stays as the adder took it
            self.obs[part] = next_obs
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
        for env in self.envs:
            env.close()


def _joined(infos: list[dict]) -> dict:
    """One info of the parts' infos: each per-env array joined in env order (ALE's lives)."""
    if len(infos) == 1:
        return infos[0]
    return {name: np.concatenate([np.asarray(info[name]) for info in infos]) if np.ndim(value) else value
            for name, value in infos[0].items()}
