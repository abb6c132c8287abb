"""What prioritized replay costs a shard, in one process (no Ray): `raypex bench --stage priorities`.

Real chunks of the config's env come from a real Collector computing initial priorities; the same
chunks then go into a uniform shard and a prioritized one built as a run builds them, filled to
their capacity. Each is timed for a `seconds` window: adding chunks, serving sample calls of
`prefetch / 2` micro-batches (what the learner's BatchSource asks in one call) and, prioritized
only, applying one update's priorities. Figures are per transition, so shapes compare.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from actors.envs import EnvSpec
from cluster.config.schema import RunConfig
from cluster.config.settings import collector_settings, priority_settings, storage_spec
from replay.priorities import PrioritySettings
from replay.rate_limit import SamplesPerInsertLimiter
from replay.shard import ReplayShard

UNLIMITED = SamplesPerInsertLimiter(0.0, 1, 1)
CAPTURED_TRANSITIONS = 20_000  # real chunks recorded once, added over and over


def captured_chunks(config: RunConfig, spec: EnvSpec) -> list[dict]:
    """Chunks of one real collector (with its initial priorities) until about CAPTURED_TRANSITIONS."""
    from actors.collector import Collector

    chunks: list[dict] = []
    settings = replace(collector_settings(config, spec, 0), td_priorities=True)
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


def shard_costs(config: RunConfig, spec: EnvSpec, seconds: float) -> dict[str, dict[str, float]]:
    """{"uniform": {...}, "prioritized": {...}}: microseconds per transition to add, to sample and
    (prioritized) to update."""
    chunks = captured_chunks(config, spec)
    settings = priority_settings(config) or PrioritySettings(config.replay.alpha, config.replay.priority_epsilon)
    shape = (config.learner.micro_batch, max(1, config.learner.prefetch // 2))
    return {name: _measure(ReplayShard(0, storage_spec(config, spec), UNLIMITED, config.seed, priorities), chunks,
                           shape, seconds)
            for name, priorities in (("uniform", None), ("prioritized", settings))}


def _measure(shard: ReplayShard, chunks: list[dict], shape: tuple[int, int], seconds: float) -> dict[str, float]:
    """One shard's figures: filled to capacity first, as in a long run."""
    micro_batch, group = shape
    position = 0
    last: dict = {}
    rng = np.random.default_rng(0)

    def add() -> int:
        nonlocal position
        chunk = chunks[position % len(chunks)]
        position += 1
        shard.add(chunk)
        return len(chunk["action"])

    while shard.storage.total_added < shard.storage.capacity:
        add()
    view = None
    if shard.priorities is not None:
        view = {"share": 1.0, "total": shard.priorities.total, "min": shard.priorities.min_mass,
                "size": shard.storage.size, "beta": 0.4}

    def sample() -> int:
        last["batch"] = shard.sample(micro_batch, group, None, view)[0]
        return micro_batch * group

    def update() -> int:
        index, stamp = last["batch"]["index"].reshape(-1), last["batch"]["stamp"].reshape(-1)
        shard.update_priorities(shard.incarnation, index, stamp, rng.random(len(index)))
        return len(index)

    figures = {"add_us": _per_transition_us(add, seconds), "sample_us": _per_transition_us(sample, seconds)}
    if shard.priorities is not None:
        figures["update_us"] = _per_transition_us(update, seconds)
    return figures
