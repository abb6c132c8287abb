"""What prioritized replay costs the replay, in one process (no Ray): `raypex bench --stage priorities`.

Real chunks of the config's env come from a real Collector computing initial priorities; the same
chunks then go into a uniform replay and a prioritized one of the config's shards, built as a run
builds them (host columns) and filled to capacity. Each is timed for a `seconds` window: adding
chunks, drawing one update's batch (indices and host gather, what the CPU learner's feed does) and,
prioritized only, applying one update's priorities. Figures are per transition, so shapes compare.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from raypex.actors.envs import EnvSpec
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.plan.settings import collector_settings, priority_settings, storage_spec
from raypex.replay.priorities import BetaSchedule, PrioritySettings
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.sharded import ShardedReplay

UNLIMITED = SamplesPerInsertLimiter(0.0, 1, 1)
CAPTURED_TRANSITIONS = 20_000  # real chunks recorded once, added over and over


def captured_chunks(config: RunConfig, spec: EnvSpec) -> list[dict]:
    """Chunks of one real collector (with its initial priorities where it has Q-values: dqn) until
    about CAPTURED_TRANSITIONS."""
    from raypex.actors.collector import Collector

    chunks: list[dict] = []
    settings = replace(collector_settings(config, spec, 0), td_priorities=not spec.action_dim)
    collector = Collector(settings, push=chunks.append, poll_weights=lambda: None)
    while sum(len(c["action"]) for c in chunks) < min(CAPTURED_TRANSITIONS, config.replay.capacity):
        collector.collect_chunk()
    return chunks


def _per_transition_us(work: Callable[[], int], seconds: float) -> float:
    """Microseconds per transition of `work` (which returns the transitions it handled), over a window."""
    handled, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or handled == 0:
        handled += work()
    return 1e6 * elapsed / handled


def replay_costs(config: RunConfig, spec: EnvSpec, seconds: float) -> dict[str, dict[str, float]]:
    """{"uniform": {...}, "prioritized": {...}}: microseconds per transition to add, to draw and
    gather and (prioritized) to update."""
    chunks = captured_chunks(config, spec)
    initial = "max" if spec.action_dim else "td"  # td3 and sac chunks carry no initial priorities
    settings = priority_settings(config) or PrioritySettings(config.replay.alpha, config.replay.priority_epsilon, initial)
    shards = config.collectors.num
    shape = (config.learner.accumulation_steps, config.learner.micro_batch)
    beta = BetaSchedule(config.replay.beta, config.replay.beta_anneal_updates, shape[0] * shape[1])
    return {name: _measure(ShardedReplay(shards, storage_spec(config, spec), UNLIMITED, config.seed, priorities,
                                         beta if priorities else None), chunks, shape, seconds)
            for name, priorities in (("uniform", None), ("prioritized", settings))}


def _measure(replay: ShardedReplay, chunks: list[dict], shape: tuple[int, int], seconds: float) -> dict[str, float]:
    """One replay's figures: every shard filled to capacity first, as in a long run."""
    groups, micro_batch = shape
    position = 0
    last: dict = {}
    rng = np.random.default_rng(0)

    def add() -> int:
        nonlocal position
        chunk = chunks[position % len(chunks)]
        replay.add(position % len(replay.shards), chunk)
        position += 1
        return len(chunk["action"])

    while min(shard.inserted for shard in replay.shards) < replay.rows_per_shard:
        add()

    def sample() -> int:
        last["draw"] = draw = replay.draw(groups, micro_batch)
        replay.gather(draw)
        return groups * micro_batch

    def update() -> int:
        keys = last["draw"].keys
        replay.update_priorities(keys, rng.random(keys.row.shape))
        return keys.row.size

    figures = {"add_us": _per_transition_us(add, seconds), "sample_us": _per_transition_us(sample, seconds)}
    if replay.prioritized:
        figures["update_us"] = _per_transition_us(update, seconds)
    return figures
