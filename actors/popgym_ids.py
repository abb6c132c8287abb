"""POPGym's Gymnasium ids (`popgym-<Task><Difficulty>-v0`, the `popgym` extra): partially observed
memory tasks, registered when the popgym package is imported, which this does on first use."""

from __future__ import annotations

import importlib

import gymnasium as gym

from raypex.actors.env_ids import UnsupportedEnv


def register_popgym(env_id: str) -> None:
    """Import popgym for a `popgym-` id this process has not registered yet."""
    if not env_id.startswith("popgym-") or env_id in gym.envs.registry:
        return
    try:
        importlib.import_module("popgym")
    except ImportError:
        raise UnsupportedEnv(f"env.id '{env_id}' needs POPGym: pip install 'raypex[popgym]'") from None
