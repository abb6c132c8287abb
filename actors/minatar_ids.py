"""MinAtar's Gymnasium ids (`MinAtar/<Game>-v1`, the `minatar` extra), registered on first use,
without the display modules MinAtar imports for drawing its games."""

from __future__ import annotations

import sys

import gymnasium as gym

from raypex.actors.env_ids import UnsupportedEnv

# What MinAtar imports only to draw its games on screen; raypex never renders them.
MINATAR_DISPLAY_MODULES = ("matplotlib", "seaborn")


def register_minatar(env_id: str) -> None:
    """MinAtar registers its Gymnasium ids only when asked to.

    MinAtar imports matplotlib and seaborn at its own import, for its display alone: 2.2 s of
    every process that makes a MinAtar env on a slow 2-core box (the driver, each collector, the
    evaluator), against 0.01 s for the rest. Where this process has not imported them already they
    are hidden for that import, which MinAtar allows (it then only cannot draw its games), and
    importable again after it. A MinAtar release that cannot do without them is imported with them.
    """
    if not env_id.startswith("MinAtar/") or env_id in gym.envs.registry:
        return
    import logging

    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))  # minatar warns on the root logger when seaborn is missing
    try:
        try:
            register_envs = _minatar_registration([n for n in MINATAR_DISPLAY_MODULES if n not in sys.modules])
        except ImportError as err:
            if (err.name or "").split(".")[0] not in MINATAR_DISPLAY_MODULES:
                raise
            register_envs = _minatar_registration([])  # a MinAtar that needs them after all
    except ImportError:
        raise UnsupportedEnv(f"env.id '{env_id}' needs MinAtar: pip install 'raypex[minatar]'") from None
    finally:
        root.setLevel(level)
    register_envs()


def _minatar_registration(hidden: list[str]):
    """MinAtar's `register_envs`, imported with the modules `hidden` unimportable meanwhile."""
    sys.modules.update(dict.fromkeys(hidden))  # a None entry: `import name` raises ImportError
    try:
        from minatar.gym import register_envs
    finally:
        for name in hidden:
            del sys.modules[name]
    return register_envs
