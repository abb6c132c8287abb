"""The Collector: steps a vector env with an epsilon-greedy CPU copy of the Q-network: an MLP in
numpy (actors/numpy_acting.py, no torch in the process), a CNN in torch (in bf16 where this CPU
acts faster so, actors/acting.py); or, for td3/sac, with the published actor and its exploration
(actors/continuous_acting.py); or, for a recurrent head (r2d2), with a numpy LSTM that carries
each env's state from step to step (actors/recurrent_acting.py).

A plain class (no Ray import). cluster/ hosts it in a Ray actor and injects `push` (sends one
Chunk to this collector's shard; it may block for backpressure or the replay-ratio limit) and
`poll_weights` (returns newer Weights when they have arrived, else None, and never blocks).
Every step goes to the collector's adder (actors/adders.py), which also owns the episode
bookkeeping; every `chunk_steps` vector steps what the adder has completed goes out as one chunk
(pixel envs: a FrameChunk, each new frame once, so replay stores every frame once; recurrent
policies: every step and the state at each sequence's start, actors/sequence_adder.py).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from raypex.actors.adders import Adder, EnvStep, FrameAdder, TransitionAdder
from raypex.actors.continuous_acting import ContinuousActingPolicy
from raypex.actors.envs import make_vector_env
from raypex.actors.exploration import BoxExploration, EpsilonGreedy, apex_epsilon
from raypex.actors.nstep import NStepFolder
from raypex.actors.numpy_acting import NumpyActingPolicy, acts_in_numpy
from raypex.actors.recurrent_acting import RecurrentActingPolicy
from raypex.actors.sequence_adder import SequenceAdder
from raypex.actors.settings import CollectorSettings
from raypex.actors.step_check import StepCheck
from raypex.replay.contracts import CollectorStats, PollWeights, PushChunk

PHASES = ("act", "env", "fold", "push")


def acting_policy(s: CollectorSettings, example_obs: np.ndarray, seed: int):
    """The collector's acting network: numpy for an MLP acting on the CPU (no torch imported), else
    torch's ActingPolicy on the GPU Ray gave it or in the form this CPU runs fastest, from its own
    random initial weights."""
    if s.head == "recurrent_q":
        return RecurrentActingPolicy(s.num_actions, s.num_envs, s.recurrent_size, np.random.default_rng(seed + 1),
                                     tuple(s.obs_shape), s.obs_dtype)
    if s.action_dim:
        return ContinuousActingPolicy(s.head, s.action_dim, s.action_noise, np.random.default_rng(seed + 1),
                                      tuple(s.obs_shape), s.obs_dtype, s.hidden)
    if s.act_device == "cpu" and acts_in_numpy(tuple(s.obs_shape), s.act_precision, s.act_fusion):
        return NumpyActingPolicy(s.num_actions, np.random.default_rng(seed + 1))
    import torch

    from raypex.actors.acting import ActingPolicy
    from raypex.learner.networks import build_q_network

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    network = build_q_network(s.obs_shape, s.num_actions, s.hidden, s.dueling, s.obs_dtype, s.layer_norm)
    return ActingPolicy(network, s.act_precision, example_obs, s.act_fusion, s.act_device)


def exploration_for(s: CollectorSettings, rng: np.random.Generator) -> EpsilonGreedy | BoxExploration:
    """How this collector explores (actors/exploration.py): Ape-X's epsilon for its index, or the
    Box actions of TD3 and SAC."""
    if s.action_dim:
        return BoxExploration(s.action_noise, s.action_low, s.action_high)
    final = apex_epsilon(s.index, s.num_collectors, s.epsilon_base, s.epsilon_alpha)
    return EpsilonGreedy(s.num_actions, final, s.epsilon_anneal_steps, rng)


class Collector:
    """Acts, folds n-step transitions and pushes whole chunks; counts what it did."""

    def __init__(self, s: CollectorSettings, push: PushChunk, poll_weights: PollWeights):
        self.s = s
        self.push = push
        self.poll_weights = poll_weights
        seed = s.seed + 1_000 * (s.index + 1)
        self.rng = np.random.default_rng(seed)
        self.env = make_vector_env(s.env_id, s.num_envs, s.env_kwargs, max(s.frame_stack, 1))
        self.obs, info = self.env.reset(seed=seed)
        self.env_ready_at = time.time()  # wall clock: the env made and reset (start-up's moments)
        self.check = StepCheck(s.env_id, self.obs.shape[1:], self.obs.dtype, f"collector {s.index}")
        self.step_started: float | None = None  # perf_counter() when the env step running now began
        self.policy = acting_policy(s, self.obs, seed)
        self.adder = make_adder(s, self.obs, info)
        self.exploration = exploration_for(s, self.rng)
        self._values_ahead: np.ndarray | None = None  # Q of self.obs, run at a chunk's end for the next act
        self.version = -1  # no published weights yet: acting with this collector's own random init
        self.version_loaded_at: float | None = None
        self.max_weight_load_s = 0.0  # the longest the env loop paused to take new weights
        self.env_steps = 0
        self.first_step_at: float | None = None  # wall clock of the first env step (start-up's end)
        self.chunks_pushed = 0
        self.transitions_pushed = 0
        self.episode_return = np.zeros(s.num_envs, np.float64)
        self.episode_length = np.zeros(s.num_envs, np.int64)
        self._episodes_lock = threading.Lock()  # stats() may be called from another thread
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []
        self.phase_s = dict.fromkeys(PHASES, 0.0)

    @property
    def epsilon(self) -> float:
        """The epsilon this collector acts with now (TD3: its action noise; SAC: 0, it samples)."""
        return self.exploration.rate(self.env_steps)

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Epsilon-greedy actions for every env from one batched forward pass, and, for initial
        priorities, Q(obs, action) of the actions taken: the same forward gives the adder the
        previous step's bootstrap values (obs is that step's next_obs), so priorities cost no pass
        of their own."""
        if not self.s.td_priorities:
            return self.exploration.act(self.policy, obs, self.env_steps), None
        # values run ahead at a chunk's end are used even if newer weights arrived since: one step
        # on the previous version, where a second forward would cost a step's acting again
        q = self.policy.q_values(obs) if self._values_ahead is None else self._values_ahead
        self._values_ahead = None
        self.adder.set_next_value(q.max(axis=1))
        actions = self.exploration.choose(q.argmax(axis=1), self.env_steps)  # td priorities: dqn only
        return actions, q[np.arange(len(actions)), actions]

    def load_newer_weights(self) -> None:
        """Load the newest weights that have arrived, if any are newer than those acting now.

        Called before every step, and by the sink while the limiter holds the env loop: a throttled
        collector then takes each version as it comes, in time it would spend asleep, and wakes
        acting with the newest."""
        t0 = time.perf_counter()
        weights = self.poll_weights()
        if weights is not None and weights.version > self.version:
            if not weights.untrained or self.exploration.acts_with_untrained_weights:
                self.policy.load(weights.arrays)
            self.version = weights.version
            self.version_loaded_at = time.time()  # wall clock: bench compares it across processes
            self.max_weight_load_s = max(self.max_weight_load_s, time.perf_counter() - t0)

    def collect_chunk(self) -> None:
        """Step `chunk_steps` times, then push the completed n-step transitions as one chunk."""
        clock = time.perf_counter
        phase = self.phase_s
        for _ in range(self.s.chunk_steps):
            t0 = clock()
            self.load_newer_weights()
            state = None
            if self.s.sequence_period:  # each env acts from its state, the initial one at an episode's start
                self.policy.start_episodes(self.adder.first)
                state = self.policy.state
            actions, q_taken = self.act(self.obs)
            t1 = clock()
            env_actions = self.exploration.to_env(actions)
            self.step_started = t1
            try:
                next_obs, reward, terminated, truncated, info = self.env.step(env_actions)
            except ValueError as err:  # a vector env that could not stack an observation of another shape
                raise self.check.explain(self.env, err, self.episode_length) or err
            self.step_started = None
            self.check(next_obs, reward, self.episode_length)
            t2 = clock()
            if self.first_step_at is None:
                self.first_step_at = time.time()
            real = self.adder.add(EnvStep(self.obs, actions, reward, terminated, truncated, next_obs,
                                          info.get("lives") if self.s.terminal_on_life_loss else None, q_taken,
                                          state))
            self._count_episodes(reward, terminated | truncated, real)
            self.obs = next_obs
            t3 = clock()
            phase["act"] += t1 - t0
            phase["env"] += t2 - t1
            phase["fold"] += t3 - t2
        t3 = clock()
        if self.s.td_priorities:  # the next step's forward, run now: the last step's bootstrap values
            self._values_ahead = self.policy.q_values(self.obs)
            self.adder.set_next_value(self._values_ahead.max(axis=1))
            phase["act"] += clock() - t3
            t3 = clock()
        chunk = self.adder.pop()
        if chunk is not None:
            # Env steps count the transitions that reach replay: an autoreset step (the reset
            # after an episode ends) is no env step, and steps still in an n-step window count
            # when their transition leaves, so env_steps always equals what replay inserted.
            steps = int(chunk["real"].sum()) if "real" in chunk else len(chunk["action"])
            self.env_steps += steps
            self.push(chunk)
            self.chunks_pushed += 1
            self.transitions_pushed += steps
        phase["push"] += clock() - t3

    def _count_episodes(self, reward: np.ndarray, done: np.ndarray, real: np.ndarray) -> None:
        # `real`: the envs whose step was part of an episode (not an autoreset step)
        self.episode_return += np.where(real, reward, 0.0)
        self.episode_length += real
        done = done & real
        if done.any():
            with self._episodes_lock:
                self.finished_returns.extend(self.episode_return[done].tolist())
                self.finished_lengths.extend(self.episode_length[done].tolist())
            self.episode_return[done] = 0.0
            self.episode_length[done] = 0

    def stats(self) -> CollectorStats:
        """Counters, plus the episodes finished since the last call (drained)."""
        started = self.step_started  # read once: the env loop clears it on another thread
        with self._episodes_lock:
            returns, lengths = self.finished_returns, self.finished_lengths
            self.finished_returns, self.finished_lengths = [], []
        return CollectorStats(
            index=self.s.index, env_steps=self.env_steps, first_step_at=self.first_step_at,
            chunks_pushed=self.chunks_pushed, transitions_pushed=self.transitions_pushed,
            episode_returns=returns, episode_lengths=lengths, epsilon=self.epsilon,
            exploration=self.exploration.kind, version=self.version, version_loaded_at=self.version_loaded_at,
            max_weight_load_s=self.max_weight_load_s, phase_s=dict(self.phase_s),
            act_precision=self.policy.precision, act_form=self.policy.form,
            env_step_running_s=0.0 if started is None else time.perf_counter() - started)


def make_adder(s: CollectorSettings, first_obs: np.ndarray, reset_info: dict) -> Adder | SequenceAdder:
    """The adder for a collector's settings: steps and sequence states for a recurrent policy, frames
    once for pixel envs, whole transitions else."""
    lives = np.asarray(reset_info["lives"]) if s.terminal_on_life_loss else None
    options = {"clip_rewards": s.clip_rewards, "life_loss": s.terminal_on_life_loss, "lives": lives}
    if s.sequence_period:
        return SequenceAdder(s.num_envs, s.gamma, s.sequence_period, **options)
    if s.frame_stack:
        return FrameAdder(s.n_step, s.gamma, s.num_envs, tuple(s.obs_shape[1:]), s.chunk_steps, first_obs,
                          with_priorities=s.td_priorities, action_dim=s.action_dim, **options)
    folder = NStepFolder(s.n_step, s.gamma, s.num_envs, s.obs_shape, s.obs_dtype, s.chunk_steps,
                         with_priorities=s.td_priorities, action_dim=s.action_dim)
    return TransitionAdder(folder, **options)
