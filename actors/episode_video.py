"""Frames of one evaluation episode, for the run's video (cluster/driver/video.py writes them).

Pixel observations show what the agent sees: the newest frame of a stack (84x84 gray for Atari)
or an image's channels, each in its own colour (MinAtar). CartPole's flat state is drawn as a cart and its pole, in
numpy (Gymnasium's own renderer needs pygame, which raypex does not install), and Pendulum's
[cos, sin, angular velocity] as its rod. MuJoCo envs are drawn by MuJoCo from recorded states
(actors/mujoco_video.py). Other flat observations have no picture: None.
"""

from __future__ import annotations

import numpy as np

MAX_FRAMES = 1500  # about a minute at 25 fps; a longer episode's video shows its start
CARTPOLE_SIZE = (100, 150)  # height, width
CARTPOLE_X_LIMIT = 2.4  # the cart's position range before the episode ends


# one colour per image channel (MinAtar's channels are objects: paddle, ball, bricks, ...)
PALETTE = np.array([[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48], [145, 30, 180],
                    [70, 240, 240], [240, 50, 230], [210, 245, 60], [250, 190, 212]], np.uint8)
MIN_SIDE = 84  # smaller images are enlarged (nearest neighbour) to about this many pixels


def frame_of(obs: np.ndarray | dict, env_id: str, stacked: bool) -> np.ndarray | None:
    """One picture (uint8 [H, W] gray or [H, W, 3] colour) of one env's observation; `stacked`:
    the observation is a frame stack (Atari), else channels of one image. Of an observation in
    parts, its first image part's."""
    if isinstance(obs, dict):
        images = [part for part in obs.values() if part.ndim == 3]
        return frame_of(images[0], env_id, False) if images else None
    if obs.ndim == 3 and stacked:
        return _enlarge(obs[-1])  # the newest frame of the stack
    if obs.ndim == 3:
        on = obs > 0  # channels as masks, each drawn in its own colour over black
        picture = np.zeros((*obs.shape[1:], 3), np.uint8)
        for channel in range(obs.shape[0]):
            picture[on[channel]] = PALETTE[channel % len(PALETTE)]
        return _enlarge(picture)
    if obs.ndim == 1 and env_id.startswith("CartPole"):
        return cartpole_frame(obs)
    if obs.ndim == 1 and env_id.startswith("Pendulum"):
        return pendulum_frame(obs)
    return None


def _enlarge(image: np.ndarray) -> np.ndarray:
    factor = max(1, MIN_SIDE // max(image.shape[:2]))
    return image if factor == 1 else image.repeat(factor, axis=0).repeat(factor, axis=1)


def cartpole_frame(state: np.ndarray) -> np.ndarray:
    """A gray picture of CartPole's state [x, x_dot, theta, theta_dot]: track, cart and pole."""
    height, width = CARTPOLE_SIZE
    image = np.full((height, width), 255, np.uint8)
    track_y = int(height * 0.75)
    image[track_y, :] = 0
    cart_x = int((state[0] / CARTPOLE_X_LIMIT * 0.5 + 0.5) * (width - 1))
    cart_x = min(max(cart_x, 10), width - 11)
    image[track_y - 6:track_y, cart_x - 10:cart_x + 11] = 60
    length = height * 0.5
    along = np.linspace(0.0, 1.0, 60)  # the pole from the cart's top, leaning by theta
    xs = np.rint(cart_x + along * length * np.sin(state[2])).astype(int)
    ys = np.rint(track_y - 6 - along * length * np.cos(state[2])).astype(int)
    inside = (ys >= 0) & (ys < height)
    for dx in (-1, 0, 1):  # three pixels wide
        image[ys[inside], np.clip(xs[inside] + dx, 0, width - 1)] = 140
    return image


PENDULUM_SIDE = 100


def pendulum_frame(state: np.ndarray) -> np.ndarray:
    """A gray picture of Pendulum's state [cos theta, sin theta, theta_dot]: its rod from the pivot,
    upright (the goal) when theta is 0."""
    side = PENDULUM_SIDE
    image = np.full((side, side), 255, np.uint8)
    pivot = side // 2
    along = np.linspace(0.0, 1.0, 60)
    xs = np.rint(pivot + along * side * 0.4 * -state[1]).astype(int)  # gymnasium draws theta counter-clockwise
    ys = np.rint(pivot - along * side * 0.4 * state[0]).astype(int)
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            image[np.clip(ys + dy, 0, side - 1), np.clip(xs + dx, 0, side - 1)] = 90
    image[pivot - 2:pivot + 3, pivot - 2:pivot + 3] = 0
    return image
