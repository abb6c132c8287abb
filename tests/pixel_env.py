"""Tiny synthetic pixel games the tests register, so CI drives the pixel paths without Atari's cost.

PixelCatch-v0: a ball falls down a 9x9 grid drawn as a 36x36 grayscale frame (4x4 pixels per cell);
the agent moves a paddle on the bottom row (0 left, 1 stay, 2 right). A caught ball scores +3 and a
missed one -3 (outside [-1, 1], so reward clipping shows), and an episode is three balls, so
episode boundaries come every 27 steps. Runs use it as `env.id: pixel_env:PixelCatch-v0` with
this directory on PYTHONPATH (Ray's workers import the module from there).

PixelReach-v0: continuous actions (td3, sac) from images with channels. A 12x12 picture of two
channels (height x width x channels, Gymnasium's image order) shows the agent's column in the first
channel and the target's in the second; the action in [-2, 2] moves the agent that many cells along
the row. Each of the 16 steps pays minus the distance to the target in cells, over 12: a policy
that walks straight to the target scores about -0.3, one acting at random or standing still about -5.
PixelReachFrames-v0 is the same game as one grayscale frame per step, for the stacked-frames path.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

GRID, CELL, BALLS = 9, 4, 3


class PixelCatch(gym.Env):
    """One frame per step: Box(0, 255, (36, 36), uint8); Discrete(3) actions."""

    def __init__(self):
        side = GRID * CELL
        self.observation_space = gym.spaces.Box(0, 255, (side, side), np.uint8)
        self.action_space = gym.spaces.Discrete(3)

    def _frame(self) -> np.ndarray:
        grid = np.zeros((GRID, GRID), np.uint8)
        grid[self.ball_row, self.ball_col] = 255
        grid[GRID - 1, self.paddle] = 128
        return np.kron(grid, np.ones((CELL, CELL), np.uint8))

    def _drop(self) -> None:
        self.ball_row, self.ball_col = 0, int(self.np_random.integers(GRID))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.paddle, self.balls = GRID // 2, 0
        self._drop()
        return self._frame(), {}

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, GRID - 1))
        self.ball_row += 1
        reward, terminated = 0.0, False
        if self.ball_row == GRID - 1:
            reward = 3.0 if self.ball_col == self.paddle else -3.0
            self.balls += 1
            terminated = self.balls == BALLS
            if not terminated:
                self._drop()
        return self._frame(), reward, terminated, False, {}


gym.register(id="PixelCatch-v0", entry_point=PixelCatch)


REACH_SIDE, REACH_STEPS = 12, 16


class PixelReach(gym.Env):
    """Box(0, 255, (12, 12, 2), uint8) observations; Box(-2, 2, (1,)) actions. With `frames`, one
    grayscale frame (12, 12) instead: the agent's column 255, the target's 128 (where they meet, 255),
    which raypex stacks as it stacks Atari's."""

    def __init__(self, frames: bool = False):
        self.frames = frames
        shape = (REACH_SIDE, REACH_SIDE) if frames else (REACH_SIDE, REACH_SIDE, 2)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def _image(self) -> np.ndarray:
        if self.frames:
            frame = np.zeros((REACH_SIDE, REACH_SIDE), np.uint8)
            frame[:, self.target] = 128
            frame[:, round(self.position)] = 255
            return frame
        image = np.zeros((REACH_SIDE, REACH_SIDE, 2), np.uint8)
        image[:, round(self.position), 0] = 255
        image[:, self.target, 1] = 255
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = float(self.np_random.integers(REACH_SIDE))
        self.target, self.steps = int(self.np_random.integers(REACH_SIDE)), 0
        return self._image(), {}

    def step(self, action):
        move = float(np.clip(np.asarray(action, np.float32).reshape(-1)[0], -2.0, 2.0))
        self.position = float(np.clip(self.position + move, 0, REACH_SIDE - 1))
        self.steps += 1
        reward = -abs(self.position - self.target) / REACH_SIDE
        return self._image(), reward, False, self.steps == REACH_STEPS, {}


gym.register(id="PixelReach-v0", entry_point=PixelReach)
gym.register(id="PixelReachFrames-v0", entry_point=PixelReach, kwargs={"frames": True})
