"""A tiny synthetic pixel game the tests register, so CI drives the pixel path without Atari's cost.

PixelCatch-v0: a ball falls down a 9x9 grid drawn as a 36x36 grayscale frame (4x4 pixels per cell);
the agent moves a paddle on the bottom row (0 left, 1 stay, 2 right). A caught ball scores +3 and a
missed one -3 (outside [-1, 1], so reward clipping shows), and an episode is three balls, so
episode boundaries come every 27 steps. Runs use it as `env.id: pixel_env:PixelCatch-v0` with
this directory on PYTHONPATH (Ray's workers import the module from there).
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
