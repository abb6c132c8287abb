"""The Collector: steps a vector env with an epsilon-greedy CPU copy of the Q-network.

A plain class (no Ray import). cluster/ hosts it in a Ray actor and injects `push` (sends one
Chunk to this collector's shard; it may block for backpressure or the replay-ratio limit) and
`poll_weights` (returns newer Weights when they have arrived, else None, and never blocks).
Every `chunk_steps` vector steps the n-step transitions completed so far go out as one chunk.
Pixel envs (frame_stack > 0) send a FrameChunk instead: each new frame once, and transitions that
name their frames by number (actors/frames.py), so replay stores every frame once.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import torch

from actors.envs import make_vector_env
from actors.exploration import annealed_epsilon, apex_epsilon
from actors.frames import FrameChunker
from actors.nstep import NStepFolder
from actors.settings import CollectorSettings
from learner.networks import build_q_network, greedy_actions
from learner.weights import load_arrays
from replay.contracts import PollWeights, PushChunk

PHASES = ("act", "env", "fold", "push")


class Collector:
    """Acts, folds n-step transitions and pushes whole chunks; counts what it did."""

    def __init__(self, s: CollectorSettings, push: PushChunk, poll_weights: PollWeights):
        torch.set_num_threads(1)
        self.s = s
        self.push = push
        self.poll_weights = poll_weights
        seed = s.seed + 1_000 * (s.index + 1)
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.env = make_vector_env(s.env_id, s.num_envs, seed, s.env_kwargs, max(s.frame_stack, 1))
        self.obs, info = self.env.reset(seed=seed)
        self.network = build_q_network(s.obs_shape, s.num_actions, s.hidden, s.dueling).eval()
        self.folder: NStepFolder | FrameChunker
        if s.frame_stack:
            self.folder = FrameChunker(s.n_step, s.gamma, s.num_envs, tuple(s.obs_shape[1:]), s.chunk_steps)
            self.folder.start(self.obs)
        else:
            self.folder = NStepFolder(s.n_step, s.gamma, s.num_envs, s.obs_shape, s.obs_dtype, s.chunk_steps)
        self.lives = np.asarray(info.get("lives", np.zeros(s.num_envs)))
        self.final_epsilon = apex_epsilon(s.index, s.num_collectors, s.epsilon_base, s.epsilon_alpha)
        self.version = -1  # no published weights yet: acting with this collector's own random init
        self.version_loaded_at: float | None = None
        self.max_weight_load_s = 0.0  # the longest the env loop paused to take new weights
        self.env_steps = 0
        self.chunks_pushed = 0
        self.transitions_pushed = 0
        self.episode_return = np.zeros(s.num_envs, np.float64)
        self.episode_length = np.zeros(s.num_envs, np.int64)
        self.episode_ended = np.zeros(s.num_envs, bool)  # so the next step is an autoreset step
        self._episodes_lock = threading.Lock()  # stats() may be called from another thread
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []
        self.phase_s = dict.fromkeys(PHASES, 0.0)

    @property
    def epsilon(self) -> float:
        """The epsilon this collector acts with now."""
        return annealed_epsilon(self.final_epsilon, self.env_steps, self.s.epsilon_anneal_steps)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Epsilon-greedy actions for every env, one batched forward pass."""
        greedy = greedy_actions(self.network, obs)
        explore = self.rng.random(self.s.num_envs) < self.epsilon
        return np.where(explore, self.rng.integers(0, self.s.num_actions, self.s.num_envs), greedy)

    def collect_chunk(self) -> None:
        """Step `chunk_steps` times, then push the completed n-step transitions as one chunk."""
        clock = time.perf_counter
        phase = self.phase_s
        for _ in range(self.s.chunk_steps):
            t0 = clock()
            weights = self.poll_weights()
            if weights is not None and weights.version > self.version:
                load_arrays(self.network, weights.arrays)
                self.version = weights.version
                self.version_loaded_at = time.time()  # wall clock: bench compares it across processes
                self.max_weight_load_s = max(self.max_weight_load_s, clock() - t0)
            actions = self.act(self.obs)
            t1 = clock()
            next_obs, reward, terminated, truncated, info = self.env.step(actions)
            t2 = clock()
            self._fold(actions, reward, terminated, truncated, next_obs, info)
            self._count_episodes(reward, terminated | truncated)
            self.obs = next_obs
            t3 = clock()
            phase["act"] += t1 - t0
            phase["env"] += t2 - t1
            phase["fold"] += t3 - t2
        self.env_steps += self.s.chunk_steps * self.s.num_envs
        t3 = clock()
        chunk = self.folder.pop()
        count = len(chunk["action"])
        if count or "frames" in chunk:  # frames must reach the shard even before any transition
            self.push(chunk)
            self.chunks_pushed += 1
            self.transitions_pushed += count
        phase["push"] += clock() - t3

    def _fold(self, actions: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
              next_obs: np.ndarray, info: dict) -> None:
        train_reward = np.clip(reward, -1.0, 1.0) if self.s.clip_rewards else reward
        if isinstance(self.folder, NStepFolder):
            self.folder.add_step(self.obs, actions, train_reward, terminated, truncated, next_obs)
            return
        episode_end = terminated | truncated
        cut = terminated
        if self.s.terminal_on_life_loss:
            lives = np.asarray(info["lives"])
            # Not on the reset step after an episode: the new game's lives go up, not down.
            cut = terminated | ((lives < self.lives) & ~self.episode_ended)
            self.lives = lives
        self.folder.add_step(actions, train_reward, cut, truncated, next_obs, episode_end)

    def _count_episodes(self, reward: np.ndarray, done: np.ndarray) -> None:
        real_step = ~self.episode_ended  # an autoreset step is not part of any episode
        self.episode_return += np.where(real_step, reward, 0.0)
        self.episode_length += real_step
        if done.any():
            with self._episodes_lock:
                self.finished_returns.extend(self.episode_return[done].tolist())
                self.finished_lengths.extend(self.episode_length[done].tolist())
            self.episode_return[done] = 0.0
            self.episode_length[done] = 0
        self.episode_ended = done

    def stats(self) -> dict:
        """Counters, plus the episodes finished since the last call (drained)."""
        with self._episodes_lock:
            returns, lengths = self.finished_returns, self.finished_lengths
            self.finished_returns, self.finished_lengths = [], []
        return {
            "index": self.s.index,
            "env_steps": self.env_steps,
            "chunks_pushed": self.chunks_pushed,
            "transitions_pushed": self.transitions_pushed,
            "episode_returns": returns,
            "episode_lengths": lengths,
            "epsilon": self.epsilon,
            "version": self.version,
            "version_loaded_at": self.version_loaded_at,
            "max_weight_load_s": self.max_weight_load_s,
            "phase_s": dict(self.phase_s),
        }
