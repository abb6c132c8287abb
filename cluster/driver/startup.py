"""Where a run's start-up goes: wall-clock moments from the command's start to the learner's first
update, from the driver and from the actors' own processes (one machine's clock for a local
cluster; on a cluster, each node's own, as good as its time sync).

summary.json's `startup_s` holds them as seconds since the command started, in the order a run
reaches them, and `raypex bench --stage startup` prints their medians. Pure bookkeeping, no Ray.
"""

from __future__ import annotations

from raypex.replay.contracts import CollectorStats

# The moments, in the order a run reaches them; each actor moment is the earliest over its actors
# (the first collector to step, not the last).
PHASES = (
    "env_checked",  # the driver: config read, the env built and checked
    "ray_connected",  # a local cluster started, or a cluster joined
    "resources_reserved",  # placement groups ready
    "actors_asked",  # every actor's creation requested
    "collector_process_started",
    "learner_process_started",
    "collector_imported",  # its modules imported (numpy, gymnasium; the env's own package loads while it is made)
    "collector_env_ready",  # its vector env made and reset
    "collector_constructed",  # acting network built (a CNN's: torch imported and, on a CPU, its form timed)
    "learner_constructed",  # replay allocated, networks and optimizer built
    "first_env_step",
    "learner_warmed_up",  # warm-up updates done, first weights published
    "first_update",
)


class StartupTimeline:
    """Wall-clock moments of one run's start-up, relative to `clock_start`."""

    def __init__(self, clock_start: float):
        self.clock_start = clock_start
        self.moments: dict[str, float] = {}

    def mark(self, phase: str, at: float | None) -> None:
        """Record `phase` at wall time `at` (None: not known yet); the earliest report wins."""
        if phase not in PHASES:
            raise ValueError(f"unknown start-up phase {phase!r}; known: {', '.join(PHASES)}")
        if at is not None and (phase not in self.moments or at < self.moments[phase]):
            self.moments[phase] = at

    def collectors(self, stats: list[CollectorStats]) -> None:
        """Take the collectors' start-up moments from their polled stats."""
        for s in stats:
            self.mark("collector_process_started", s.startup.get("process_started"))
            self.mark("collector_imported", s.startup.get("imported"))
            self.mark("collector_env_ready", s.startup.get("env_ready"))
            self.mark("collector_constructed", s.startup.get("constructed"))
            self.mark("first_env_step", s.first_step_at)

    def learner(self, info: dict) -> None:
        """Take the learner's start-up moments from its warm-up reply."""
        self.mark("learner_process_started", info.get("process_started"))
        self.mark("learner_constructed", info.get("constructed"))
        self.mark("learner_warmed_up", info.get("warmed_up"))

    def seconds(self) -> dict[str, float]:
        """Each known moment as seconds since the command started, in PHASES order."""
        return {phase: round(self.moments[phase] - self.clock_start, 3) for phase in PHASES if phase in self.moments}
