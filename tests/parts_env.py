"""An env whose observation is a Dict of an image and a vector, and whose reward needs both: the
image lights one pixel in one of its four quadrants, the vector says (one-hot) how far to turn that
quadrant, and the rewarded answer is the quadrant turned so far (Discrete: its number; Box: the
sign of its column, times the vector's sign). Ten steps, each a fresh draw: 10 for a policy that
reads both parts, about 2.5 (Discrete) for one that reads either alone."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

SIDE = 8
STEPS = 10


class QuadrantTurn(gym.Env):
    """Dict {"image": [SIDE, SIDE, 1] uint8, "turn": [4] float32}; `continuous`: one Box action in
    [-1, 1] scored by -(a - target)^2 (target +-0.8), else 4 Discrete actions scored 1 when right.
    `tuple_space`: the same two parts as a Tuple (image, turn)."""

    metadata: dict = {"render_modes": []}

    def __init__(self, continuous: bool = False, tuple_space: bool = False):
        image = gym.spaces.Box(0, 255, (SIDE, SIDE, 1), np.uint8)
        turn = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
        self.tuple_space = tuple_space
        self.observation_space = (gym.spaces.Tuple((image, turn)) if tuple_space
                                  else gym.spaces.Dict({"image": image, "turn": turn}))
        self.continuous = continuous
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(4)
        self.steps = 0

    def _draw(self):
        self.quadrant = int(self.np_random.integers(4))
        self.turn = int(self.np_random.integers(4))
        image = np.zeros((SIDE, SIDE, 1), np.uint8)
        half = SIDE // 2
        row = int(self.np_random.integers(half)) + half * (self.quadrant // 2)
        col = int(self.np_random.integers(half)) + half * (self.quadrant % 2)
        image[row, col, 0] = 255
        turn = np.zeros(4, np.float32)
        turn[self.turn] = 1.0
        return (image, turn) if self.tuple_space else {"image": image, "turn": turn}

    def target(self) -> float | int:
        """The rewarded answer for the observation shown now."""
        if self.continuous:  # the quadrant's column as a sign, flipped by an odd turn
            return 0.8 * (1 if self.quadrant % 2 else -1) * (-1 if self.turn % 2 else 1)
        return (self.quadrant + self.turn) % 4

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._draw(), {}

    def step(self, action):
        if self.continuous:
            reward = -float((float(np.asarray(action).reshape(-1)[0]) - self.target()) ** 2)
        else:
            reward = float(int(action) == self.target())
        self.steps += 1
        return self._draw(), reward, False, self.steps >= STEPS, {}
