"""Turns the counters that actors report into the TensorBoard scalars and the progress line.

Pure bookkeeping (no Ray): the driver feeds it collector and shard stats every poll and learner
metrics every epoch; rates are differences over the last RATE_WINDOW_S of polls.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from raypex.cluster.driver.startup import StartupTimeline
from raypex.replay.contracts import CollectorStats, EpochStats, ShardStats

# Rates span this many seconds of polls: collectors report in chunks and, held by the replay
# ratio limiter, in bursts, so the difference between two polls half a second apart was often 0
# on a run making 35 env steps/s (HalfCheetah on a slow CPU).
RATE_WINDOW_S = 10.0


class RunMetrics:
    """Accumulates run-wide counters and produces scalar dicts keyed by TensorBoard tag."""

    def __init__(self, env_steps_offset: int = 0, startup: StartupTimeline | None = None):
        self.env_steps_offset = env_steps_offset
        self.startup = startup or StartupTimeline(time.time())
        self.env_steps = env_steps_offset
        self.learner_version = 0
        self.last_return: float | None = None
        # per collector: (episodes, return sum) of its processes before the newest, and its newest's
        self._episode_counts: dict[int, tuple[int, float, int, float]] = {}
        self.last_eval: float | None = None
        self.eval_cpu_s = 0.0  # the evaluator's CPU seconds over every evaluation that came back
        self.last_loss: float | None = None
        self.lag_samples: list[float] = []
        self.lag_max = 0
        self._polls: deque[tuple[float, int, int, int]] = deque()  # time, env steps, inserted, sampled
        self.sps: float | None = None  # env steps/s over the rate window; None until two polls measured it
        self.learner_samples_s = 0.0
        self.learner_train_s = 0.0
        self.learner_samples = 0
        self.wait_s = 0.0
        self.shard_inserted: list[int] = []
        self.shard_sizes: list[int] = []
        # per shard, what its collector sent that died with a learner process (the most seen: a
        # replacement learner knows it only once that collector's first chunk reached it)
        self.shard_lost_writes: list[int] = []
        self.replay_bytes_per_transition: float | None = None
        self.collector_restarts = 0
        self._collector_restarts_by_shard: list[int] = []
        # prioritized replay: transitions whose new priority was applied, dropped by a shard as stale,
        # or not sent by the learner (in-flight bound)
        self.priority_updates: dict[str, int] = {}

    def poll(self, collectors: list[CollectorStats], shards: list[ShardStats], now: float | None = None,
             gone: frozenset[int] = frozenset()) -> dict[str, float]:
        """Scalars from one poll of every collector and shard. `gone`: collectors counted out (their
        node lost), whose entry in `collectors` is their last answer: what they sent that their
        shard does not hold went with their node, and counts as lost."""
        now = time.perf_counter() if now is None else now
        self.startup.collectors(collectors)
        # A restarted collector counts on from the steps its shard stored, which can be a little below
        # what the dead process last reported: the env-step axis never goes back. Each shard knows
        # its collectors' env steps up to its newest stored chunk, so a restarted collector that has
        # not read them yet, or one that died for good (`collectors` empty: shards alone), is
        # counted from there.
        reported = [c.env_steps for c in collectors] if collectors else [0] * len(shards)
        # A collector counted out did at least the steps its shard holds, restored ones included.
        counted = [max(r, s.writer_env_steps, s.inserted if i in gone else 0)
                   for i, (r, s) in enumerate(zip(reported, shards, strict=True))]
        self.env_steps = max(self.env_steps, self.env_steps_offset + sum(counted))
        # Each shard counts the collector processes that wrote to it; all but the first were
        # restarts. A shard that was itself restarted counts again from zero: keep the most seen.
        self._collector_restarts_by_shard = most_seen(self._collector_restarts_by_shard,
                                                      [s.writer_attachments - 1 for s in shards])
        self.collector_restarts = sum(self._collector_restarts_by_shard)
        self.shard_inserted = [s.inserted for s in shards]
        self.shard_sizes = [s.size for s in shards]
        self.shard_lost_writes = most_seen(self.shard_lost_writes, [
            max(s.lost_writes, count - s.inserted) if i in gone else s.lost_writes
            for i, (s, count) in enumerate(zip(shards, counted, strict=True))])
        inserted = sum(self.shard_inserted)
        sampled = sum(s.sampled for s in shards)
        # What the preallocated storage costs per transition slot (pixels: one frame plus scalars).
        self.replay_bytes_per_transition = sum(s.nbytes for s in shards) / sum(s.capacity for s in shards)
        scalars: dict[str, float] = {
            "replay/size": sum(self.shard_sizes),
            "replay/bytes_per_transition": self.replay_bytes_per_transition,
        }
        explored = [c for c in collectors if c.exploration]
        if explored:
            scalars[f"collector/{explored[0].exploration}"] = float(np.mean([c.epsilon for c in explored]))
        if inserted:
            scalars["replay/replay_ratio"] = sampled / inserted
        scalars.update(priority_scalars(shards))
        if shards and shards[0].priorities is not None:  # counted by each learner process's replay: keep the most seen
            for field, counted_now in (("priority_updates_applied", sum(s.priorities.updates_applied for s in shards)),
                                       ("priority_updates_stale", sum(s.priorities.updates_dropped for s in shards))):
                self.priority_updates[field] = max(self.priority_updates.get(field, 0), counted_now)
        polls = self._polls
        while len(polls) > 1 and polls[1][0] <= now - RATE_WINDOW_S:
            polls.popleft()  # keep the newest poll at least the window old, and all after it
        if polls:
            then, steps, was_inserted, was_sampled = polls[0]
            dt = max(now - then, 1e-9)
            self.sps = (self.env_steps - steps) / dt
            scalars["charts/SPS"] = self.sps
            scalars["replay/insert_rate"] = (inserted - was_inserted) / dt
            scalars["replay/sample_rate"] = (sampled - was_sampled) / dt
        polls.append((now, self.env_steps, inserted, sampled))
        for i, c in enumerate(collectors):  # each collector's own curve (Ape-X: each acts with its own epsilon)
            if c.exploration:
                scalars[f"collector/{i}/{c.exploration}"] = c.epsilon
            if c.episode_returns:
                scalars[f"collector/{i}/episodic_return"] = float(np.mean(c.episode_returns))
        returns = [r for c in collectors for r in c.episode_returns]
        lengths = [n for c in collectors for n in c.episode_lengths]
        for c in collectors:
            before, before_sum, newest, newest_sum = self._episode_counts.get(c.index, (0, 0.0, 0, 0.0))
            if c.episodes < newest:  # a new process (a restart, or a slot taken again) counts from zero
                before, before_sum = before + newest, before_sum + newest_sum
            self._episode_counts[c.index] = (before, before_sum, c.episodes, c.return_sum)
        if returns:
            self.last_return = float(np.mean(returns))
            scalars["charts/episodic_return"] = self.last_return
            scalars["charts/episodic_length"] = float(np.mean(lengths))
        # The newest epoch result can trail the weights collectors already hold (epochs are queued),
        # and no collector can hold a version the learner has not published.
        self.learner_version = max([self.learner_version] + [c.version for c in collectors])
        lags = [self.learner_version - c.version for c in collectors if c.version >= 0]
        if lags:
            scalars["perf/policy_lag_mean"] = float(np.mean(lags))
            scalars["perf/policy_lag_max"] = float(max(lags))
            self.lag_samples.append(float(np.mean(lags)))
            self.lag_max = max(self.lag_max, max(lags))
        return scalars

    def epoch(self, m: EpochStats) -> dict[str, float]:
        """Scalars from one learner epoch's figures (the algorithm's losses as losses/<name>)."""
        self.learner_version = max(self.learner_version, m.version)
        # what the shards stored so far: the env-step count between polls (evaluations are due by it)
        self.env_steps = max(self.env_steps, self.env_steps_offset + m.writer_env_steps)
        self.startup.mark("first_update", m.first_update_at)
        self.last_loss = m.losses["td_loss"]
        samples = m.updates_in_epoch * m.samples_per_update
        self.learner_samples += samples
        self.learner_train_s += m.epoch_s
        self.wait_s += m.wait_fraction * m.epoch_s
        scalars = {
            **{f"losses/{name}": value for name, value in m.losses.items()},
            "learner/updates_per_s": m.updates_in_epoch / m.epoch_s,
            "learner/samples_per_s": samples / m.epoch_s,
            "learner/wait_fraction": m.wait_fraction,
            "perf/broadcast_ms": m.broadcast_ms,
        }
        if m.grad_scale is not None:
            scalars["learner/grad_scale"] = m.grad_scale
        if m.beta is not None:
            scalars["replay/beta"] = m.beta
        if m.priority_updates_unsent is not None:
            # transitions whose errors the learner did not send (in-flight bound, CUDA copies backed up)
            self.priority_updates["priority_updates_unsent"] = m.priority_updates_unsent
        if m.gpu_busy_fraction is not None:
            scalars["learner/gpu_busy_fraction"] = m.gpu_busy_fraction
        if m.allreduce_fraction is not None:
            scalars["learner/allreduce_fraction"] = m.allreduce_fraction
        return scalars

    def evaluation(self, result: dict) -> dict[str, float]:
        """Scalars from one finished evaluation (EvaluatorActor.evaluate's result)."""
        self.last_eval = result["mean"]
        return {"eval/return_mean": result["mean"], "eval/return_min": result["min"]}

    @property
    def episodes(self) -> int:
        """Episodes this command's collectors finished."""
        return sum(before + newest for before, _, newest, _ in self._episode_counts.values())

    @property
    def episode_return_mean(self) -> float | None:
        """Their mean return; None before the first."""
        total = sum(before + newest for _, before, _, newest in self._episode_counts.values())
        return total / self.episodes if self.episodes else None

    @property
    def policy_lag_mean(self) -> float | None:
        """Mean policy lag over all polls so far."""
        return float(np.mean(self.lag_samples)) if self.lag_samples else None

    @property
    def wait_fraction(self) -> float | None:
        """Fraction of the learner's training time spent waiting for data."""
        return self.wait_s / self.learner_train_s if self.learner_train_s else None

    @property
    def samples_per_s(self) -> float | None:
        """Learner samples per second of training time."""
        return self.learner_samples / self.learner_train_s if self.learner_train_s else None

    def summary_fields(self, collect_s: float | None) -> dict:
        """Its part of summary.json; `collect_s` is how long the collectors ran in this process."""
        return {
            "env_steps": self.env_steps,
            "env_steps_per_s": (self.env_steps - self.env_steps_offset) / collect_s if collect_s else None,
            "episodes": self.episodes,
            "episode_return_mean": self.episode_return_mean,
            "learner_samples": self.learner_samples,
            "learner_samples_per_s": self.samples_per_s,
            "learner_wait_fraction": self.wait_fraction,
            "policy_lag_mean": self.policy_lag_mean,
            "policy_lag_max": self.lag_max,
            "replay_size_per_shard": self.shard_sizes,
            "replay_inserted_per_shard": self.shard_inserted,
            # env steps == sum(replay_inserted_per_shard) + this, exactly
            "replay_lost_transitions": sum(self.shard_lost_writes),
            "replay_bytes_per_transition": self.replay_bytes_per_transition,
            **self.priority_updates,
            "startup_s": self.startup.seconds(),
            "eval_cpu_s": round(self.eval_cpu_s, 3),
        }


def most_seen(seen: list[int], now: list[int]) -> list[int]:
    """Per shard, the larger of what earlier polls saw and what this one reads: counts a restarted
    learner's replay starts again from zero (or learns late) must not go back."""
    return [max(old, new) for old, new in zip(seen or [0] * len(now), now)]


def priority_scalars(shards: list[ShardStats]) -> dict[str, float]:
    """Prioritized replay's figures over all shards: the mean and the largest priority mass of a
    stored transition, and the smallest importance weight served since the last poll."""
    prioritized = [s for s in shards if s.priorities is not None]
    size = sum(s.size for s in prioritized)
    if not prioritized or size == 0:
        return {}
    scalars = {"replay/priority_mean": sum(s.priorities.mass for s in prioritized) / size,
               "replay/priority_max": max(s.priorities.max_mass for s in prioritized)}
    weight_min = min(s.priorities.is_weight_min for s in prioritized)
    if np.isfinite(weight_min):
        scalars["replay/is_weight_min"] = weight_min
    return scalars
