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

import difflib
import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from raypex.actors.env_ids import UnsupportedEnv

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
    module, _, name = str(path).partition(":")
    if not module or not name:
        raise ValueError(f"'{path}' is not an import path of the form package.module:Name")
    return str(path), kwargs


def resolve_wrappers(entries: Sequence) -> list[Wrap]:
    """Each entry as a callable env -> wrapped env; UnsupportedEnv in one line for one that does not import."""
    wraps = []
    for entry in entries:
        path, kwargs = wrapper_entry(entry)
        module_name, _, name = path.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise UnsupportedEnv(f"env.wrappers: '{path}': {module_name} cannot be imported ({err})") from None
        wrapper = getattr(module, name, None)
        if wrapper is None:
            close = difflib.get_close_matches(name, [n for n in dir(module) if not n.startswith("_")], n=1)
            hint = f"; did you mean {module_name}:{close[0]}?" if close else ""
            raise UnsupportedEnv(f"env.wrappers: '{path}': {module_name} has no {name}{hint}")
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
