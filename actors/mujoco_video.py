"""Pictures of a MuJoCo episode for the run's video: the first env's state (joint positions and
velocities) is recorded at every step while it runs, and drawn afterwards by MuJoCo's own offscreen
renderer in a separate env of the same id.

Drawing afterwards keeps the evaluation's envs free of a renderer, and only a recorded evaluation
(every eval.video_every-th) pays for pictures. With no screen, MuJoCo renders through EGL (Mesa's
software renderer where there is no GPU: about 35 ms a picture on the 2-core box, whatever its
size), so at most MAX_PICTURES states are drawn, evenly spaced, and the video plays faster than the
episode ran. Where no OpenGL can be had the episode simply has no video.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from raypex.actors.apng import ApngWriter, EncodedVideo

MAX_PICTURES = 250  # 10 s at 25 fps; a 1000-step HalfCheetah episode shows every 4th step
SIZE = (96, 128)  # height, width


def is_mujoco(env_id: str) -> bool:
    """Whether `env_id` is one of Gymnasium's MuJoCo envs."""
    spec = gym.envs.registry.get(env_id)
    return spec is not None and str(spec.entry_point).startswith("gymnasium.envs.mujoco")


def headless_rendering() -> None:
    """Have MuJoCo render offscreen through EGL on Linux (its default, GLFW, needs a screen),
    unless the user chose MUJOCO_GL; call before mujoco is first imported in the process."""
    if sys.platform.startswith("linux"):
        os.environ.setdefault("MUJOCO_GL", "egl")


def first_env_state(vector_env) -> tuple[np.ndarray, np.ndarray]:
    """(qpos, qvel) copies of the first env of a synchronous vector env of a MuJoCo env."""
    data = vector_env.envs[0].unwrapped.data
    return data.qpos.copy(), data.qvel.copy()


def draw_states(env_id: str, env_kwargs: dict[str, Any], states: list[tuple[np.ndarray, np.ndarray]]) -> EncodedVideo | None:
    """The video of evenly spaced `states` (at most MAX_PICTURES RGB pictures), seen by the env's
    own camera; None, with one warning, when MuJoCo cannot render here."""
    if not states:
        return None
    stride = math.ceil(len(states) / MAX_PICTURES)
    try:
        env = gym.make(env_id, render_mode="rgb_array", height=SIZE[0], width=SIZE[1], **env_kwargs)
    except Exception as err:  # noqa: BLE001 - no OpenGL here: the run goes on without this video
        warnings.warn(f"no video of {env_id}: MuJoCo cannot render here ({err})", stacklevel=2)
        return None
    try:
        env.reset(seed=0)
        pictures = ApngWriter()
        for qpos, qvel in states[::stride]:
            env.unwrapped.set_state(qpos, qvel)
            pictures.add(env.render())
        return pictures.finish()
    except Exception as err:  # noqa: BLE001 - as above, when the context fails at the first picture
        warnings.warn(f"no video of {env_id}: MuJoCo cannot render here ({err})", stacklevel=2)
        return None
    finally:
        env.close()
