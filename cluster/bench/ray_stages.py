"""The Ray stages of `raypex bench`: each starts its own actors on the connected local cluster,
measures, and releases everything before the next stage (a 2-core machine holds one set)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import ray

from raypex.actors.envs import EnvSpec
from raypex.cluster.bench.learner_probes import ProbedLearnerActor
from raypex.cluster.bench.local_stages import RawEnvProbe
from raypex.cluster.bench.recorder import RunRecorder
from raypex.cluster.bench.report import BenchRow, bounding_stage
from raypex.cluster.config.loading import with_overrides
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.ray_runtime.runtime import RayRuntime
from raypex.cluster.driver.run import TrainingRun
from raypex.cluster.ray_runtime.wiring import RunActors, reserve_resources, resource_request, start_actors
from raypex.cluster.plan.topology import plan_run
from raypex.replay.contracts import CollectorStats

# Stage windows are measured against the clock; these bound how long a stage waits for actors to
# reach a state before it gives up with an error instead of hanging.
_STAGE_TIMEOUT_S = 120.0
# The replay ratio of `--stage learner`: 400k samples/s need 6k env steps/s at this ratio.
LEARNER_STAGE_RATIO = 64
_POLL_S = 0.05

T = TypeVar("T")


class BenchError(Exception):
    """A bench stage could not complete (one-line message)."""


@dataclass
class RunRecord:
    """What the bench keeps from one training run."""

    summary: dict
    train_wall_s: float
    timeline: list[tuple[float, int]]  # (seconds since collection started, env steps)
    rss_full: dict[str, int] | None
    rss_end: dict[str, int]
    bytes_per_transition: float
    replay_ratio: float
    fill_steps: int  # the run's replay.min_size + replay.error_buffer: env steps collectors may run ahead
    collector_phases: dict[str, float] = field(default_factory=dict)
    learner_phases: dict[str, float] = field(default_factory=dict)

    def _rate_between(self, start: float, end: float) -> float:
        times = np.array([t for t, _ in self.timeline])
        steps = np.array([n for _, n in self.timeline], dtype=np.float64)
        at = np.interp([start, end], times, steps)
        return float((at[1] - at[0]) / max(end - start, 1e-9))

    def _seconds_at(self, steps: float) -> float:
        """When the run's env-steps count first reached `steps`, interpolated between the reports
        around it (collection starts at 0 steps at 0 s)."""
        times = np.array([0.0] + [t for t, _ in self.timeline])
        counts = np.array([0] + [n for _, n in self.timeline], dtype=np.float64)
        after = int(np.argmax(counts >= steps))
        if after == 0:
            return 0.0
        t0, t1, n0, n1 = times[after - 1], times[after], counts[after - 1], counts[after]
        return float(t0 + (t1 - t0) * (steps - n0) / max(n1 - n0, 1e-9))

    def _rate_over_steps(self, start_fraction: float, end_fraction: float) -> float:
        total = self.timeline[-1][1] if self.timeline else 0
        start, end = start_fraction * total, end_fraction * total
        return float((end - start) / max(self._seconds_at(end) - self._seconds_at(start), 1e-9))

    @property
    def first_tenth_rate(self) -> float:
        """Env steps/s over the run's first 10% of env steps. Counted by env steps, not by time:
        counts reach the driver in reports, and under load the first report can come after the
        first tenth of the time has gone, which would read as no steps at all."""
        return self._rate_over_steps(0.0, 0.1)

    @property
    def last_tenth_rate(self) -> float:
        """Env steps/s over the run's last 10% of env steps."""
        return self._rate_over_steps(0.9, 1.0)

    @property
    def tenth_rates(self) -> list[float]:
        """Env steps/s in each tenth of the collection time: a rate that falls tenth after tenth is
        a pipeline slowing down; one high tenth at the start is replay filling before the limiter
        holds collectors to the learner."""
        tenth = 0.1 * self.train_wall_s
        return [self._rate_between(i * tenth, (i + 1) * tenth) for i in range(10)]

    @property
    def rss_full_total(self) -> float:
        """Summed resident bytes when replay was first full (at the end if it never filled)."""
        return float(sum((self.rss_full or self.rss_end).values()))

    @property
    def rss_end_total(self) -> float:
        """Summed resident bytes at the end of the run."""
        return float(sum(self.rss_end.values()))

    @property
    def rss_detail(self) -> dict:
        """Per-actor resident bytes at both moments."""
        return {"when_replay_full": self.rss_full, "at_end": self.rss_end}

    def e2e_rows(self, config: RunConfig) -> list[BenchRow]:
        """The e2e rows: throughput, replay ratio held vs asked, policy lag."""
        s = self.summary
        rows = [BenchRow("e2e_env_steps_per_s", s["env_steps_per_s"] or 0.0, "env steps/s"),
                BenchRow("e2e_learner_samples_per_s", s["learner_samples_per_s"] or 0.0, "samples/s")]
        asked = config.replay.samples_per_insert
        if asked > 0:
            rows.append(BenchRow.against("e2e_replay_ratio", self.replay_ratio, "samples/insert", asked, None))
        rows.append(BenchRow("e2e_policy_lag_mean", s["policy_lag_mean"] or 0.0, "versions"))
        rows.append(BenchRow("e2e_policy_lag_max", float(s["policy_lag_max"]), "versions"))
        return rows

    def profile_rows(self) -> tuple[list[BenchRow], str]:
        """Per-phase time fractions of collectors and learner, and the stage that bounds throughput."""
        rows = [BenchRow(f"profile_collector_{p}", f, "fraction") for p, f in self.collector_phases.items()]
        rows += [BenchRow(f"profile_learner_{p}", f, "fraction") for p, f in self.learner_phases.items()]
        return rows, bounding_stage(self.collector_phases, self.learner_phases)


def _fractions(seconds: dict[str, float]) -> dict[str, float]:
    total = sum(seconds.values()) or 1.0
    return {k: v / total for k, v in seconds.items()}


class ClusterBench:
    """Runs the Ray stages against one connected local cluster."""

    def __init__(self, config: RunConfig, spec: EnvSpec, progress: ProgressLine, device: str = "cpu",
                 leave_cluster: Callable[[], None] = lambda: None):
        self.config = config
        self.spec = spec
        self.progress = progress
        self.device = device  # the learner's, as `raypex train` would choose it
        # ends this process's part in the cluster: a local one shut down, a joined one left up
        self.leave_cluster = leave_cluster
        self.act_precisions: list[str] = []  # each collector's acting dtype in the collect stage
        self.act_forms: list[str] = []  # ... and its dtype with whether its forward was fused
        self.requests_per_forward: float | None = None  # collectors.acting served: the batching the servers had

    # -- helpers ------------------------------------------------------------------------------
    def _start(self, config: RunConfig):
        group = reserve_resources(config, self.device)
        actors = start_actors(config, self.spec, group, self.device, uuid.uuid4().hex[:8], ProbedLearnerActor)
        ray.get(actors.learner.warmup.remote(None))
        return group, actors

    @staticmethod
    def _release(group, actors: RunActors) -> None:
        for collector in actors.collectors:
            collector.stop.remote()
        for actor in actors.all():
            ray.kill(actor, no_restart=True)
        group.release()

    @staticmethod
    def _poll_until(read: Callable[[], T], done: Callable[[T], bool], what: str) -> T:
        """Call `read` every few ms until `done` accepts its value; that value (BenchError after
        the stage timeout)."""
        deadline = time.monotonic() + _STAGE_TIMEOUT_S
        while not done(value := read()):
            if time.monotonic() > deadline:
                raise BenchError(f"gave up waiting {_STAGE_TIMEOUT_S:g}s for {what}")
            time.sleep(_POLL_S)
        return value

    @staticmethod
    def _collector_stats(actors: RunActors) -> list[CollectorStats]:
        return ray.get([c.stats.remote() for c in actors.collectors])

    def _env_steps(self, actors: RunActors) -> int:
        return sum(s.env_steps for s in self._collector_stats(actors))

    # -- stages -------------------------------------------------------------------------------
    def collect_and_broadcast(self, seconds: float, repeats: int) -> tuple[float, float, float, float]:
        """On one set of actors: the collectors' env steps/s (learner not training), then the
        broadcast latency to those running collectors, its ray.put + ray.get reference and the
        longest env-loop pause to take weights (all in ms)."""
        self.progress.message(f"bench: collect ({seconds:g}s, {self.config.collectors.num} collectors)")
        config = with_overrides(self.config, ["replay.samples_per_insert=0"])  # nothing throttles them
        group, actors = self._start(config)
        try:
            collect = self._collect(actors, seconds)
            self.progress.message(f"bench: broadcast ({repeats} versions)")
            return (collect, *self._broadcast(actors, repeats))
        finally:
            self._release(group, actors)

    def raw_envs_at_once(self, seconds: float) -> float:
        """ALE alone on the collectors' cores: the raw vector env stepped in each collector's place
        (its bundle, its CPUs), all at once, no learner running; their env steps/s summed."""
        self.progress.message(f"bench: env_raw_all ({seconds:g}s, the env alone in each collector's place)")
        group = reserve_resources(self.config, self.device)
        cpus = resource_request(self.config, self.device).collector_cpus
        probes = [ray.remote(RawEnvProbe).options(num_cpus=cpus, scheduling_strategy=group.collector_place(c.index))
                  .remote(c.settings.env_id, c.settings.num_envs, c.settings.env_kwargs, c.settings.seed)
                  for c in plan_run(self.config, self.spec).collectors]
        try:
            ray.get([p.ready.remote() for p in probes], timeout=_STAGE_TIMEOUT_S)  # made and reset first
            return sum(ray.get([p.rate.remote(seconds) for p in probes], timeout=_STAGE_TIMEOUT_S + seconds))
        except ray.exceptions.GetTimeoutError:
            raise BenchError(f"gave up waiting {_STAGE_TIMEOUT_S:g}s for the env probes in the collectors' places") from None
        finally:
            for probe in probes:
                ray.kill(probe, no_restart=True)
            group.release()

    def _collect(self, actors: RunActors, seconds: float) -> float:
        for c in actors.collectors:
            c.run.remote()
        first = self._poll_until(lambda: self._env_steps(actors), lambda steps: steps > 0,
                                 "the collectors' first chunk")
        served_before = self._served_counts(actors)
        start = time.perf_counter()
        time.sleep(seconds)  # the measurement window itself, not synchronization
        stats = self._collector_stats(actors)
        self.act_precisions = [s.act_precision for s in stats]
        self.act_forms = [s.act_form for s in stats]
        rate = (sum(s.env_steps for s in stats) - first) / (time.perf_counter() - start)
        if actors.servers:  # how many collectors' requests each forward of the acting servers answered
            served = {key: value - served_before[key] for key, value in self._served_counts(actors).items()}
            self.requests_per_forward = served["requests"] / max(served["forwards"], 1)
        return rate

    @staticmethod
    def _served_counts(actors: RunActors) -> dict:
        counts = ray.get([server.counts.remote() for server in actors.servers])
        return {key: sum(c[key] for c in counts) for key in ("forwards", "requests")}

    def _broadcast(self, actors: RunActors, repeats: int) -> tuple[float, float, float]:
        latencies = []
        for _ in range(repeats):
            put_at = ray.get(actors.learner.publish_now.remote())
            version = ray.get(actors.learner.published_weights.remote()).version
            stats = self._poll_until(
                lambda: self._collector_stats(actors),
                lambda stats, version=version: all(s.version >= version for s in stats),
                f"every collector to act with weights version {version}")
            latencies.append((max(s.version_loaded_at for s in stats) - put_at) * 1e3)
        pause_ms = max(s.max_weight_load_s for s in self._collector_stats(actors)) * 1e3
        put_get = ray.get(actors.learner.put_get_ms.remote())
        return float(np.median(latencies)), put_get, pause_ms

    def learner_feed(self, seconds: float, config: RunConfig | None = None, from_memory: bool = True) -> dict:
        """The learner fed by the replay beside it with collectors running, then (`from_memory`)
        the same epoch loop fed from batches already made (collectors stopped), `seconds` each:
        {"fed": ..., "memory": ...}, each {samples_per_s, gpu_busy, wait_fraction}."""
        group, actors = self._start(config or self.config)
        try:
            for c in actors.collectors:
                c.run.remote()
            fed = ray.get(actors.learner.measure.remote(seconds, False))
            for c in actors.collectors:
                c.stop.remote()
            memory = ray.get(actors.learner.measure.remote(seconds, True)) if from_memory else None
        finally:
            self._release(group, actors)
        return {"fed": fed, "memory": memory}

    def learner_variants(self, variants: list[tuple[str, str]], seconds: float) -> list[dict]:
        """`learner_feed` per (precision, cuda_graphs) variant, with a replay ratio of
        LEARNER_STAGE_RATIO: high enough that collectors are not what the learner waits for, and
        a limit still, so that they do not take every core from the learner."""
        results = []
        for precision, graphs in variants:
            self.progress.message(f"bench: learner {precision} cuda_graphs={graphs} ({seconds:g}s fed, "
                                  f"{seconds:g}s from memory)")
            config = with_overrides(self.config, [f"learner.precision={precision}", f"learner.cuda_graphs={graphs}",
                                                  f"replay.samples_per_insert={LEARNER_STAGE_RATIO}"])
            results.append({"precision": precision, "cuda_graphs": graphs, **self.learner_feed(seconds, config)})
        return results

    def observed_run(self, config: RunConfig, run_dir: Path, observer) -> TrainingRun:
        """A whole training run of `config` on this cluster, watched by `observer` (a
        RunObserver), its progress lines in run_dir/progress.log; returns the finished run. It
        ends without the final evaluation, checkpoint and policy.pt2, which nothing here measures."""
        run_dir.mkdir(parents=True)
        with open(run_dir / "progress.log", "w") as log:
            run = TrainingRun(config, self.spec, run_dir, RayRuntime(connected_device=self.device), time.time(),
                              ProgressLine(log), observers=(observer,), final_files=False)
            run.execute(config_text="bench")
        return run

    def training_run(self, run_dir: Path, env_steps: int) -> RunRecord:
        """A training run of the config for `env_steps` env steps (no stop on eval), with replay
        sized to fill during a run of that length."""
        self.progress.message(f"bench: training run of {env_steps} env steps")
        num = self.config.collectors.num
        capacity = max(self.config.learner.micro_batch, int(0.3 * env_steps / num))
        capacity = min(capacity, self.config.replay.capacity)
        config = with_overrides(self.config, [
            f"stop.env_steps={env_steps}", "stop.eval_return=null", f"replay.capacity={capacity}",
            f"replay.min_size={min(self.config.replay.min_size, capacity * num)}"])
        recorder = RunRecorder(capacity)
        run = self.observed_run(config, run_dir, recorder)
        shards = recorder.shard_stats
        inserted = sum(s.inserted for s in shards)
        sampled = sum(s.sampled for s in shards)
        nbytes = sum(s.nbytes for s in shards)
        slots = sum(s.capacity for s in shards)
        learner_phases = dict(recorder.learner_profile.get("phase_s", {}))
        if learner_phases:
            wait = recorder.learner_profile["wait_s"]
            learner_phases["feed"] = max(0.0, learner_phases["feed"] - wait)
            learner_phases["wait"] = wait
        return RunRecord(
            summary=run.summary(), train_wall_s=recorder.train_wall_s, timeline=recorder.timeline,
            rss_full=recorder.rss_full, rss_end=recorder.rss_end, bytes_per_transition=nbytes / max(slots, 1),
            replay_ratio=sampled / max(inserted, 1), fill_steps=config.replay.min_size + config.replay.error_buffer,
            collector_phases=_fractions(recorder.collector_phase_s),
            learner_phases=_fractions(learner_phases),
        )
