"""What collectors and the evaluator check of every vector step, so that an env that goes bad
mid-run (a NaN reward, an infinite observation, an observation no longer of its space's shape)
stops the run with one line naming the env, the step and what, instead of training on garbage or
failing far from the cause.

The check on the hot path is two sums: a NaN or an infinity anywhere makes a sum non-finite, and
only then is the step looked at element by element (which also tells an overflowing sum of large
finite values, not a fault, from a real one; observations are summed in float64, where float32
values cannot overflow). Integer observations (frames) cannot be NaN: only
their rewards are summed. An observation of another shape never reaches the caller from
Gymnasium's vector envs (they fail to stack it): `explain` turns that failure into the same kind
of line, from the per-env observations the vector env kept.
"""

from __future__ import annotations

import numpy as np


class EnvWentBad(RuntimeError):
    """An env returned something no training can use; the message is the one line for the user."""


class StepCheck:
    """Checks the vector steps of one vector env of `env_id`, whose observations look like
    `example` (one array [E, ...], or parts {key: [E, ...]}: actors/observation_parts.py)."""

    def __init__(self, env_id: str, example, who: str):
        self.env_id = env_id
        arrays = example if isinstance(example, dict) else {None: example}
        # each part's (one env's shape, as the vector env hands it on; whether it is float)
        self.parts = {key: (tuple(array.shape[1:]), np.issubdtype(array.dtype, np.floating))
                      for key, array in arrays.items()}
        self.who = who  # "collector 0", "the evaluator"

    def __call__(self, obs, reward: np.ndarray, steps: np.ndarray) -> None:
        """EnvWentBad when a reward or a float observation of this vector step is not finite, or the
        observations are not of the space's shape; `steps`: each env's step within its episode."""
        arrays = obs if isinstance(obs, dict) else {None: obs}
        finite = np.isfinite(reward.sum())
        for key, (shape, is_float) in self.parts.items():
            part = arrays[key]
            if part.shape[1:] != shape:
                self._fail(0, steps, f"observations{self._of(key)} of shape {list(part.shape[1:])}, where its space "
                                     f"has {list(shape)}")
            finite = finite and (not is_float or np.isfinite(part.sum(dtype=np.float64)))
        if finite:
            return
        bad_reward = ~np.isfinite(reward)
        if bad_reward.any():
            env = int(np.flatnonzero(bad_reward)[0])
            self._fail(env, steps, f"a reward of {reward[env]}")
        for key, (_, is_float) in self.parts.items():
            flat = arrays[key].reshape(len(arrays[key]), -1)
            bad_obs = ~np.isfinite(flat) if is_float else np.zeros(flat.shape, bool)
            if bad_obs.any():
                env, index = (int(i) for i in np.argwhere(bad_obs)[0])
                self._fail(env, steps, f"an observation{self._of(key)} holding {flat[env, index]} (at flat index {index})")

    @staticmethod
    def _of(key) -> str:
        return "" if key is None else f" part {key!r}"

    def explain(self, vector_env, err: ValueError, steps: np.ndarray) -> EnvWentBad | None:
        """The line for a vector env's step that failed to stack its envs' observations (one of
        another shape), or None when `err` is not that."""
        inner = vector_env.unwrapped  # the env's own, before raypex's conversion
        observations = getattr(inner, "_env_obs", None)
        if not isinstance(observations, (list, tuple)):
            return None
        for env, obs in enumerate(observations):
            for key, space, value in _parts(inner.single_observation_space, obs):
                shape = tuple(np.shape(value))
                if space.shape is not None and shape != tuple(space.shape):
                    return self._fault(env, steps, f"an observation{self._of(key)} of shape {list(shape)}, where its "
                                                   f"space has {list(space.shape)}")
        return None

    def _fault(self, env: int, steps: np.ndarray, what: str) -> EnvWentBad:
        return EnvWentBad(f"env.id {self.env_id}: env {env} of {self.who} returned {what} at step "
                          f"{int(steps[env]) + 1} of its episode")

    def _fail(self, env: int, steps: np.ndarray, what: str) -> None:
        raise self._fault(env, steps, what)


def _parts(space, obs) -> list:
    """(key, space, value) of each part of one env's observation: a Dict's or Tuple's parts keyed
    as actors/observation_parts.py keys them, or the whole observation (key None)."""
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, dict) and isinstance(obs, dict):
        return [(str(key), part, obs.get(key)) for key, part in spaces.items()]
    if isinstance(spaces, tuple) and isinstance(obs, (tuple, list)) and len(obs) == len(spaces):
        return [(str(i), part, value) for i, (part, value) in enumerate(zip(spaces, obs))]
    return [(None, space, obs)]
