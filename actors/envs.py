"""Environment construction and the check that raypex can handle an env's spaces.

Collectors and the evaluator build their vector envs here, so every env goes through the same
path. `inspect_env` runs in the driver before any actor starts: an unknown id or a space we cannot
learn on is a one-line `UnsupportedEnv`, not a crash deep inside an actor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np


class UnsupportedEnv(Exception):
    """The env id is unknown or its spaces are not ones raypex learns on (one-line message)."""


@dataclass(frozen=True)
class EnvSpec:
    """What the networks and the replay storage need to know about an environment."""

    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int


def make_vector_env(env_id: str, num_envs: int, seed: int | None, kwargs: dict[str, Any]) -> gym.vector.VectorEnv:
    """A Gymnasium vector env with NEXT_STEP autoreset. Envs with a native vectorized
    implementation (CartPole) get it; others are stepped in-process one after another (Gymnasium's
    sync mode), which needs no extra processes inside an actor."""
    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=None, **kwargs)
    env.reset(seed=seed)
    return env


def inspect_env(env_id: str, kwargs: dict[str, Any]) -> EnvSpec:
    """Check that `env_id` exists and has a Box observation and a Discrete action space."""
    if env_id not in gym.envs.registry:
        close = [name for name in gym.envs.registry if name.lower().startswith(env_id.split("-")[0].lower())]
        hint = f"; similar: {', '.join(sorted(close)[:5])}" if close else ""
        raise UnsupportedEnv(f"env.id '{env_id}' is not a registered Gymnasium environment{hint}")
    try:
        env = gym.make(env_id, **kwargs)
    except TypeError as err:
        raise UnsupportedEnv(f"env.kwargs are not accepted by '{env_id}': {err}") from None
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    if not isinstance(act_space, gym.spaces.Discrete):
        raise UnsupportedEnv(
            f"env.id '{env_id}' has a {type(act_space).__name__} action space; "
            "raypex (DQN family) needs Discrete actions"
        )
    if not isinstance(obs_space, gym.spaces.Box):
        raise UnsupportedEnv(
            f"env.id '{env_id}' has a {type(obs_space).__name__} observation space; "
            "raypex needs a Box observation space"
        )
    if len(obs_space.shape) != 1:
        raise UnsupportedEnv(
            f"env.id '{env_id}' has observations of shape {obs_space.shape}; "
            "raypex supports flat (1-D) vector observations"
        )
    return EnvSpec(tuple(obs_space.shape), np.dtype(obs_space.dtype).name, int(act_space.n))
