"""The check a user's own env passes in the driver before any actor starts.

An env whose code raises, whose spaces are not Gymnasium spaces, whose reset takes no seed or
whose step returns the wrong things would otherwise fail inside every collector at once, far from
its cause. Built once here and stepped once, each such fault is one line that names the env, its
file and what is wrong; the user's own traceback rides along for `--debug`. Nothing here imports
Ray.
"""

from __future__ import annotations

import contextlib
import inspect
from numbers import Real
from typing import Any

import gymnasium as gym
import numpy as np

from raypex.actors.env_ids import UnsupportedEnv, env_code, register, user_code_failure

STEP_FIELDS = "(observation, reward, terminated, truncated, info)"


def _takes_seed(reset) -> bool:
    try:
        params = inspect.signature(reset).parameters.values()
    except (TypeError, ValueError):  # a builtin: cannot tell, let the call say
        return True
    return any(p.name == "seed" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _shape_fault(obs: Any, space: gym.spaces.Space) -> str | None:
    if not isinstance(space, gym.spaces.Box):
        return None  # raypex's own space check (actors/envs.py) says what it supports
    shape = np.shape(obs)
    if shape != space.shape:
        return f"an observation of shape {shape}, where observation_space says {space.shape}"
    return None


def check_user_env(env_id: str, kwargs: dict[str, Any]) -> None:
    """Build the env `env_id` names (a user's code), reset it with a seed and step it once; an
    UnsupportedEnv naming the env, its file and the fault otherwise."""
    code, module = env_code(env_id, fresh=True)  # the file as it is now, even if imported before
    gym_id = register(env_id, code, module)
    file = code.file
    where = f"{env_id}' ({file.name})" if file is not None else f"{env_id}'"

    def fault(what: str) -> UnsupportedEnv:
        return UnsupportedEnv(f"env.id '{where}: {what}")

    try:
        env = gym.make(gym_id, **kwargs)
    except Exception as err:  # noqa: BLE001 - the user's code may raise anything: one line says what
        raise user_code_failure(env_id, file, "building the env", err) from None
    try:
        for name in ("observation_space", "action_space"):
            space = getattr(env.unwrapped, name, None)
            if not isinstance(space, gym.spaces.Space):
                raise fault(f"{name} is {type(space).__name__}, not a gymnasium.spaces.Space")
        if not _takes_seed(env.unwrapped.reset):
            raise fault("reset() takes no seed argument; Gymnasium's API is reset(self, *, seed=None, options=None)")
        try:
            reply = env.reset(seed=0)
        except Exception as err:  # noqa: BLE001 - as above
            raise user_code_failure(env_id, file, "reset(seed=0)", err) from None
        if not (isinstance(reply, tuple) and len(reply) == 2):
            raise fault(f"reset() returned {type(reply).__name__}, expected (observation, info)")
        problem = _shape_fault(reply[0], env.observation_space)
        if problem:
            raise fault(f"reset() returned {problem}")
        try:
            reply = env.step(env.action_space.sample())
        except Exception as err:  # noqa: BLE001 - as above
            raise user_code_failure(env_id, file, "step()", err) from None
        if not (isinstance(reply, tuple) and len(reply) == 5):
            count = len(reply) if isinstance(reply, tuple) else type(reply).__name__
            raise fault(f"step() returned {count} values, expected 5 {STEP_FIELDS}")
        obs, reward, terminated, truncated, _ = reply
        problem = _shape_fault(obs, env.observation_space)
        if problem:
            raise fault(f"step() returned {problem}")
        if not isinstance(reward, Real | np.number) or isinstance(reward, bool):
            raise fault(f"step() returned a reward of type {type(reward).__name__}, expected a number")
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, bool | np.bool_):
                raise fault(f"step() returned {name} of type {type(flag).__name__}, expected a bool")
    finally:
        with contextlib.suppress(Exception):  # a close that fails says nothing about training on the env
            env.close()
