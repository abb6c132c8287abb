"""Greedy evaluation: run each of `episodes` envs of a vector env through one full episode, or
its first `max_episode_steps` steps where it runs longer.

All episodes run side by side in one vector env, so an evaluation costs one batched forward pass
per env step rather than one per episode. Used by the evaluator actor (cluster/hosts/evaluator_actor.py),
which a run hands published weights while the learner trains, and by `raypex eval`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from raypex.actors.apng import ApngWriter, EncodedVideo
from raypex.actors.envs import make_vector_env
from raypex.actors.episode_video import MAX_FRAMES, frame_of
from raypex.actors.mujoco_video import draw_states, first_env_state, headless_rendering, is_mujoco
from raypex.actors.step_check import StepCheck
from raypex.replay.contracts import each_part

Policy = Callable[[np.ndarray], np.ndarray]  # observations [B, ...] (float, or uint8 pixels) -> actions [B] (Box: [B, d])


class Evaluator:
    """Owns an evaluation vector env with one env per episode."""

    def __init__(self, env_id: str, env_kwargs: dict, episodes: int, seed: int, frame_stack: int = 4,
                 epsilon: float = 0.0, stacked: bool = False, wrappers: tuple = (), *, max_episode_steps: int):
        self.mujoco = is_mujoco(env_id)  # pictures drawn afterwards from recorded states (actors/mujoco_video.py)
        if self.mujoco:
            headless_rendering()
        self.env = make_vector_env(env_id, episodes, env_kwargs, frame_stack, wrappers)
        self.env_id = env_id
        self.env_kwargs = env_kwargs
        self.stacked = stacked  # observations are frame stacks (pixels), for the video's frames
        self.video: EncodedVideo | None = None  # the first episode of the last recorded evaluation
        self.episodes = episodes
        self.seed = seed
        self.max_episode_steps = max_episode_steps  # an episode still running then stops there, scored so far
        self.cut = 0  # episodes of the last evaluation stopped at max_episode_steps
        # A small random-action rate keeps a greedy policy from stalling a game forever (Breakout
        # waits for FIRE after a lost life), as in the DQN papers' evaluation protocol.
        self.epsilon = epsilon
        self.rng = np.random.default_rng(seed)
        space = self.env.single_action_space
        self.num_actions = int(space.n) if hasattr(space, "n") else 0  # 0: Box actions, never randomized
        self.runs = 0
        self.step_started: float | None = None  # perf_counter() when the env step running now began

    def evaluate(self, policy: Policy, give_up: tuple[float, float] | None = None,
                 record: bool = False) -> np.ndarray | None:
        """Undiscounted returns of one episode per env under `policy` (a fresh seed per call).

        With `give_up=(target_mean, max_return)` the evaluation stops, returning None, as soon as
        the mean could no longer reach `target_mean` even if every unfinished episode scored
        `max_return`: a policy far from the target then costs a few dozen env steps instead of
        its longest episode. Without it every episode runs to its end, or to `max_episode_steps`
        (counted in `cut`): a stalled policy in an env with no time limit ends there. With `record`, the first
        episode's pictures (actors/episode_video.py) are kept in `video`, encoded as they come
        (None: this env has no picture).
        """
        obs, _ = self.env.reset(seed=self.seed + 10_007 * self.runs)
        self.runs += 1
        self.cut = 0
        returns = np.zeros(self.episodes, np.float64)
        running = np.ones(self.episodes, bool)
        lengths = np.zeros(self.episodes, np.int64)  # each episode's steps so far, for a fault's line
        check = StepCheck(self.env_id, obs, "the evaluator")
        # Total shortfall from max_return the finished episodes may have before the target is lost.
        allowed_shortfall = self.episodes * (give_up[1] - give_up[0]) if give_up else None
        pictures: ApngWriter | None = ApngWriter() if record and not self.mujoco else None
        states: list | None = [] if record and self.mujoco else None
        while running.any():
            if states is not None and running[0]:
                states.append(first_env_state(self.env))
            if pictures is not None and running[0] and len(pictures) < MAX_FRAMES:
                picture = frame_of(each_part(lambda part: part[0], obs), self.env_id, self.stacked)
                if picture is None:
                    pictures = None  # this env has no picture
                else:
                    pictures.add(picture)
            actions = policy(obs)
            if self.epsilon and self.num_actions:
                explore = self.rng.random(self.episodes) < self.epsilon
                actions = np.where(explore, self.rng.integers(0, self.num_actions, self.episodes), actions)
            self.step_started = time.perf_counter()
            try:
                obs, reward, terminated, truncated, _ = self.env.step(actions)
            except ValueError as err:  # a vector env that could not stack an observation of another shape
                raise check.explain(self.env, err, lengths) or err
            self.step_started = None
            check(obs, reward, lengths)
            lengths += running
            returns += np.where(running, reward, 0.0)
            ended = terminated | truncated
            cut = running & ~ended & (lengths >= self.max_episode_steps)
            self.cut += int(cut.sum())
            running &= ~(ended | cut)
            if give_up and (give_up[1] - returns[~running]).sum() > allowed_shortfall:
                return None
        if states is not None:
            self.video = draw_states(self.env_id, self.env_kwargs, states)
        elif record:
            self.video = pictures.finish() if pictures is not None else None
        return returns

    def close(self) -> None:
        """Release the env."""
        self.env.close()
