"""The Collector: three parts in a loop. Its EnvStepper steps the vector env (actors/env_stepper.py),
the policy its algorithm's plug-in builds acts (actors/policy.py: one batched `act` for every env,
exploration and any recurrent state included; the built-ins' are actors/q_policy.py,
recurrent_acting.py and continuous_acting.py), and its adder folds every step into what replay
stores.

A plain class (no Ray import). cluster/ hosts it in a Ray actor and injects `push` (sends one
Chunk to this collector's shard; it may block for backpressure or the replay-ratio limit) and
`poll_weights` (returns newer Weights when they have arrived, else None, and never blocks).
Every step goes to the collector's adder (actors/adders.py), which also owns the episode
bookkeeping; every `chunk_steps` vector steps what the adder has completed goes out as one chunk
(pixel envs: a FrameChunk, each new frame once, so replay stores every frame once; recurrent
policies: every step and the state at each sequence's start, actors/sequence_adder.py).
"""

from __future__ import annotations

import time

import numpy as np

from raypex.actors.action_scaling import ActionScale
from raypex.actors.adders import Adder, EnvStep, FrameAdder, TransitionAdder
from raypex.actors.env_stepper import EnvStepper
from raypex.actors.nstep import NStepFolder
from raypex.actors.sequence_adder import SequenceAdder
from raypex.actors.served_acting import ServedForward
from raypex.actors.settings import CollectorSettings
from raypex.learner.algorithms.registry import algorithm
from raypex.replay.contracts import CollectorStats, PollWeights, PushChunk

PHASES = ("act", "env", "fold", "push")


class Collector:
    """Acts, folds n-step transitions and pushes whole chunks; counts what it did."""

    def __init__(self, s: CollectorSettings, push: PushChunk, poll_weights: PollWeights,
                 served: ServedForward | None = None):
        """`served`: the line to the node's acting server (collectors.acting served), which then
        runs the policy's forward."""
        self.s = s
        self.push = push
        self.poll_weights = poll_weights
        seed = s.seed + 1_000 * (s.index + 1)
        self.rng = np.random.default_rng(seed)
        self.stepper = EnvStepper(s.env_id, s.num_envs, s.env_kwargs, s.frame_stack, seed, f"collector {s.index}",
                                  s.env_wrappers)
        plugin = algorithm(s.algo)
        self.policy = (plugin.policy(s, self.stepper.obs, seed, self.rng) if served is None
                       else plugin.policy(s, self.stepper.obs, seed, self.rng, served=served))
        self.state = self.policy.initial_state(s.num_envs)  # each env's, before its next step
        self.adder = make_adder(s, self.stepper.obs, self.stepper.reset_info)
        self.action_scale = ActionScale(s.action_low, s.action_high) if s.action_dim else None
        self._ahead: tuple | None = None  # the next step's act, run at a chunk's end for its bootstrap values
        self._bootstraps = False  # whether the policy gives the adder bootstrap values (set by its first act)
        self.version = -1  # no published weights yet: acting with this collector's own random init
        self.version_loaded_at: float | None = None
        self.max_weight_load_s = 0.0  # the longest the env loop paused to take new weights
        self.env_steps = 0
        self.chunks_pushed = 0
        self.transitions_pushed = 0
        self.episodes_finished = 0  # drained into stats answers, whether or not the driver got each one
        self.return_total = 0.0
        self.phase_s = dict.fromkeys(PHASES, 0.0)

    @property
    def epsilon(self) -> float:
        """The epsilon this collector acts with now (TD3: its action noise; SAC: 0, it samples)."""
        return self.policy.exploration_rate(self.env_steps)

    def act(self) -> tuple[np.ndarray, dict]:
        """The policy's actions for every env from one batched call, and what the adder takes
        beside them; the env's states move on. Bootstrap values (initial priorities) are the value
        of `obs`, the previous step's next observation: the adder gets them from the same call."""
        # an act run ahead at a chunk's end is used even if newer weights arrived since: one step
        # on the previous version, where a second forward would cost a step's acting again
        acted, self._ahead = self._ahead or self.policy.act(self.stepper.obs, self.state, self.env_steps), None
        actions, extras, self.state = acted
        self._bootstraps = "bootstrap" in extras
        if self._bootstraps:
            self.adder.set_next_value(extras["bootstrap"])
        return actions, extras

    def load_newer_weights(self) -> None:
        """Load the newest weights that have arrived, if any are newer than those acting now.

        Called before every step, and by the sink while the limiter holds the env loop: a throttled
        collector then takes each version as it comes, in time it would spend asleep, and wakes
        acting with the newest."""
        t0 = time.perf_counter()
        weights = self.poll_weights()
        if weights is not None and weights.version > self.version:
            if not weights.untrained or self.policy.acts_with_untrained_weights:
                self.policy.load(weights)
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
            state = self.state  # what this step starts from (the adder stores it at a sequence's start)
            actions, extras = self.act()
            t1 = clock()
            env_actions = actions if self.action_scale is None else self.action_scale.to_env(actions)
            obs = self.stepper.obs
            next_obs, reward, terminated, truncated, info = self.stepper.step(env_actions)
            t2 = clock()
            real = self.adder.add(EnvStep(obs, actions, reward, terminated, truncated, next_obs,
                                          info.get("lives") if self.s.terminal_on_life_loss else None,
                                          extras.get("q_taken"), state))
            self.stepper.count_episodes(reward, terminated | truncated, real)
            if self.state is not None:  # an env whose next step starts an episode starts from the initial state
                self.state = self.policy.start_episodes(self.state, self.adder.first)
            t3 = clock()
            phase["act"] += t1 - t0
            phase["env"] += t2 - t1
            phase["fold"] += t3 - t2
        t3 = clock()
        if self._bootstraps:  # the next step's act, run now: the last step's bootstrap values
            self._ahead = self.policy.act(self.stepper.obs, self.state, self.env_steps)
            self.adder.set_next_value(self._ahead[1]["bootstrap"])
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

    def stats(self) -> CollectorStats:
        """Counters, plus the episodes finished since the last call (drained)."""
        returns, lengths = self.stepper.finished_episodes()
        self.episodes_finished += len(returns)
        self.return_total += float(sum(returns))
        return CollectorStats(
            index=self.s.index, env_steps=self.env_steps, first_step_at=self.stepper.first_step_at,
            chunks_pushed=self.chunks_pushed, transitions_pushed=self.transitions_pushed,
            episode_returns=returns, episode_lengths=lengths, epsilon=self.epsilon,
            exploration=self.policy.exploration, version=self.version, version_loaded_at=self.version_loaded_at,
            max_weight_load_s=self.max_weight_load_s, phase_s=dict(self.phase_s),
            act_precision=self.policy.precision, act_form=self.policy.form,
            env_step_running_s=self.stepper.running_s(), episodes=self.episodes_finished,
            return_sum=self.return_total)


def make_adder(s: CollectorSettings, first_obs: np.ndarray, reset_info: dict) -> Adder | SequenceAdder:
    """The adder for a collector's settings: steps and sequence states for a recurrent policy, frames
    once for pixel envs, whole transitions else."""
    lives = np.asarray(reset_info["lives"]) if s.terminal_on_life_loss else None
    options = {"clip_rewards": s.clip_rewards, "life_loss": s.terminal_on_life_loss, "lives": lives}
    if s.sequence_period:
        return SequenceAdder(s.num_envs, s.gamma, s.sequence_period, **options)
    if s.frame_stack:
        return FrameAdder(s.n_step, s.gamma, s.num_envs, s.chunk_steps, first_obs,
                          with_priorities=s.td_priorities, action_dim=s.action_dim, **options)
    folder = NStepFolder(s.n_step, s.gamma, s.num_envs, s.obs_shape, s.obs_dtype, s.chunk_steps,
                         with_priorities=s.td_priorities, action_dim=s.action_dim)
    return TransitionAdder(folder, **options)
