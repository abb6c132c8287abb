"""MuJoCo's C warnings through Python's, minus one every HalfCheetah build prints."""

from __future__ import annotations

import gymnasium as gym

# What MuJoCo 3.17 and 4.0 say on every build of Gymnasium's own half_cheetah.xml: nothing the
# user can act on, printed once per env (40 lines a run); every other MuJoCo warning still shows.
_KNOWN_MUJOCO_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)


def quiet_known_mujoco_warnings(env_id: str) -> None:
    """Route MuJoCo's C warnings through Python's warnings, minus the known one above (once per process)."""
    spec = gym.envs.registry.get(env_id)
    if spec is None or not str(spec.entry_point).startswith("gymnasium.envs.mujoco"):
        return
    try:
        import mujoco
    except ImportError:
        return  # inspect_env says how to install it
    if getattr(quiet_known_mujoco_warnings, "installed", False):
        return

    def on_warning(message: str) -> None:
        if not message.startswith(_KNOWN_MUJOCO_WARNINGS):
            import warnings

            warnings.warn(f"MuJoCo: {message}", stacklevel=2)

    mujoco.set_mju_user_warning(on_warning)
    quiet_known_mujoco_warnings.installed = True
