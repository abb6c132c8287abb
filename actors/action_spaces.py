"""Which action spaces raypex learns on: Discrete actions (dqn) and a bounded 1-D Box (td3, sac).
Checked in the driver before any actor starts; anything else is one line naming the space and
what is supported (actors/envs.py check_algo_fits says which algorithm fits which)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from raypex.actors.env_ids import UnsupportedEnv


def action_fields(env_id: str, space: gym.spaces.Space) -> dict[str, Any]:
    """EnvSpec's action fields for `space`: a Discrete one, or a bounded 1-D Box; one line for any other."""
    if isinstance(space, gym.spaces.Discrete):
        return {"num_actions": int(space.n)}
    supported = "raypex learns on Discrete actions (algo.name dqn) and bounded 1-D Box actions (td3, sac)"
    if isinstance(space, gym.spaces.Box):
        low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
        if len(space.shape) != 1:
            raise UnsupportedEnv(f"env.id '{env_id}' has a Box action space of shape {space.shape}; {supported}")
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise UnsupportedEnv(f"env.id '{env_id}' has an unbounded Box action space of shape {space.shape} "
                                 f"(low {low.tolist()}, high {high.tolist()}); {supported}")
        return {"num_actions": 0, "action_low": tuple(low.tolist()), "action_high": tuple(high.tolist())}
    shape = getattr(space, "shape", None)
    raise UnsupportedEnv(f"env.id '{env_id}' has a {type(space).__name__} action space"
                         f"{f' of shape {shape}' if shape else ''}; {supported}")
