"""RunRecorder: what the bench watches during a training run (a RunObserver), and how it reads
every actor's resident memory."""

from __future__ import annotations

import time

import psutil
import ray

from raypex.cluster.driver.observer import RunObserver
from raypex.cluster.driver.run import TrainingRun
from raypex.cluster.ray_runtime.wiring import RunActors


def actor_rss(actors: RunActors) -> dict[str, int]:
    """Resident bytes of every actor process, keyed by role (all on this machine)."""
    roles = [f"collector-{i}" for i in range(len(actors.collectors))] + ["learner", "evaluator"]
    pids = ray.get([a.pid.remote() for a in actors.all()])
    return {role: psutil.Process(pid).memory_info().rss for role, pid in zip(roles, pids)}


class RunRecorder(RunObserver):
    """Watches a training run (a RunObserver) for the bench: its env-steps timeline, the actors'
    memory when replay is first full and at the end, and where collectors and learner spent time."""

    def __init__(self, replay_capacity: int):
        self.replay_capacity = replay_capacity
        self.timeline: list[tuple[float, int]] = []
        self.rss_full: dict[str, int] | None = None
        self.rss_end: dict[str, int] = {}
        self.train_wall_s = 0.0
        self.shard_stats: list[dict] = []
        self.collector_phase_s: dict[str, float] = {}
        self.learner_profile: dict = {}

    def after_poll(self, run: TrainingRun) -> None:
        """One timeline point; the memory once every shard is full."""
        if run.collect_start is not None:
            self.timeline.append((time.time() - run.collect_start, run.metrics.env_steps))
        sizes = run.metrics.shard_sizes
        if self.rss_full is None and sizes and min(sizes) >= self.replay_capacity:
            self.rss_full = actor_rss(run.actors)

    def before_finish(self, run: TrainingRun) -> None:
        """The training time, the memory at the end and every actor's counters."""
        actors = run.actors
        self.train_wall_s = time.time() - run.collect_start
        self.rss_end = actor_rss(actors)
        self.shard_stats = ray.get(actors.learner.replay_stats.remote())
        phases: dict[str, float] = {}
        for stats in ray.get([c.stats.remote() for c in actors.collectors]):
            for phase, seconds in stats.phase_s.items():
                phases[phase] = phases.get(phase, 0.0) + seconds
        self.collector_phase_s = phases
        self.learner_profile = ray.get(actors.learner.profile.remote())
