"""env.wrappers: Gymnasium wrappers named in the config, applied in order to every env that a
collector or the evaluator makes (and to the env `raypex train` inspects first, so that the
networks fit what the wrappers make of the observations).

An entry is an import path, `package.module:Name` (a gymnasium.Wrapper, or any callable that
takes an env and returns one), or a one-key mapping from the path to its keyword arguments:

    env:
      wrappers:
        - gymnasium.wrappers:TimeAwareObservation
        - {gymnasium.wrappers:ClipReward: {max_reward: 0.5}}

The path is imported where the env is made: a package installed on every node, or a module in
the working directory raypex ships with the env's own code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from raypex.actors.env_ids import UnsupportedEnv
from raypex.import_path import ImportPathError, resolve_import_path, split_import_path

Wrap = Callable[[gym.Env], gym.Env]


def wrapper_entry(entry: Any) -> tuple[str, dict[str, Any]]:
    """(import path, keyword arguments) of one config entry; ValueError naming what is allowed."""
    if isinstance(entry, dict) and len(entry) == 1:
        (path, kwargs), = entry.items()
        kwargs = {} if kwargs is None else kwargs
        if not isinstance(kwargs, dict):
            raise ValueError(f"{path}'s value must be a mapping of its keyword arguments, got {kwargs!r}")
    elif isinstance(entry, str):
        path, kwargs = entry, {}
    else:
        raise ValueError(f"an entry is package.module:Name or {{package.module:Name: {{keyword: value}}}}, got {entry!r}")
    split_import_path(path)
    return str(path), kwargs


def resolve_wrappers(entries: Sequence) -> list[Wrap]:
    """Each entry as a callable env -> wrapped env; UnsupportedEnv in one line for one that does not import."""
    wraps = []
    for entry in entries:
        path, kwargs = wrapper_entry(entry)
        try:
            wrapper = resolve_import_path(path)
        except ImportPathError as err:
            raise UnsupportedEnv(f"env.wrappers: '{path}': {err}") from None
        if not callable(wrapper):
            raise UnsupportedEnv(f"env.wrappers: '{path}' is a {type(wrapper).__name__}, not a wrapper (a "
                                 "gymnasium.Wrapper or a function of an env)")
        wraps.append(functools.partial(_wrap, path, wrapper, kwargs))
    return wraps


def _wrap(path: str, wrapper: Callable, kwargs: dict, env: gym.Env) -> gym.Env:
    try:
        wrapped = wrapper(env, **kwargs)
    except TypeError as err:
        raise UnsupportedEnv(f"env.wrappers: '{path}' does not take {kwargs or 'no arguments'}: {err}") from None
    if not isinstance(wrapped, gym.Env):
        raise UnsupportedEnv(f"env.wrappers: '{path}' returned a {type(wrapped).__name__}, not an env")
    return wrapped


def wrapped(env: gym.Env, entries: Sequence) -> gym.Env:
    """`env` wrapped by every entry, in order."""
    for wrap in resolve_wrappers(entries):
        env = wrap(env)
    return env
