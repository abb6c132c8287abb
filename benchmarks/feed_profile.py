"""`python -m benchmarks.feed_profile CONFIG [--shards N] [--seconds S] [--profile] [k=v ...]`:
the learner drawing from a replay beside it, in one process (no Ray, no collectors).

A replay of N shards of the config's storage (on the GPU when there is one and it fits, as a run
keeps it) is filled to capacity with synthetic chunks of the config's shapes (random frames or
observations, priorities when prioritized). Then, each for `seconds`:

  draw_ms        one update's draw on the host (indices, importance weights)
  memory         the epoch loop cycling 32 batches already drawn (the learner's own rate)
  fed            the epoch loop drawing every update from the replay (nothing inserting)

`--profile` adds cProfile's top entries of the fed loop: where the host's time per update goes.
It separates the cost of drawing from a run's other costs (inserts from collectors, CPU shared
with them), which `raypex bench --stage learner` measures together.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import pstats
import sys
import time

import numpy as np

from raypex.actors.envs import UnsupportedEnv, inspect_env
from raypex.cluster.config.loading import ConfigError, load_config
from raypex.cluster.config.shipped import config_path
from raypex.cluster.plan.topology import plan_run
from raypex.replay.rate_limit import SamplesPerInsertLimiter

CHUNK_STEPS = 16


def synthetic_chunks(spec, prioritized: bool, count: int, rng: np.random.Generator) -> list[dict]:
    """`count` chunks of CHUNK_STEPS steps of a collector with the storage's envs: FrameChunks of
    random frames for pixel storage, whole random transitions otherwise."""
    from raypex.actors.adders import EnvStep, FrameAdder

    envs = spec.num_envs
    if not spec.frame_stack:
        size = CHUNK_STEPS * envs
        chunks = []
        for _ in range(count):
            obs = rng.normal(size=(2, size, *spec.obs_shape)).astype(spec.obs_dtype)
            chunks.append({"obs": obs[0], "next_obs": obs[1], "action": rng.integers(0, 2, size),
                           "return": rng.normal(size=size).astype(np.float32),
                           "discount": np.full(size, 0.97, np.float32),
                           "priority": rng.random(size).astype(np.float32)})
        return chunks
    stacks = rng.integers(0, 256, (envs, *spec.obs_shape), dtype=np.uint8)
    adder = FrameAdder(3, 0.99, envs, CHUNK_STEPS, stacks, with_priorities=prioritized)
    chunks = []
    while len(chunks) < count:
        following = rng.integers(0, 256, (envs, *spec.obs_shape), dtype=np.uint8)
        if prioritized:
            adder.set_next_value(rng.random(envs))
        adder.add(EnvStep(stacks, rng.integers(0, 2, envs), rng.normal(size=envs), rng.random(envs) < 0.001,
                          np.zeros(envs, bool), following, q_taken=rng.random(envs) if prioritized else None))
        stacks = following
        if adder.buffered >= CHUNK_STEPS:
            chunks.append(adder.pop())
    return chunks


def profile_feed(config, shards: int, seconds: float, with_profile: bool) -> dict:
    """The figures of the module docstring for `config` with `shards` shards."""
    import torch

    from raypex.cluster.bench.throughput import from_memory, timed_epochs
    from raypex.learner.learner import Learner

    planned = plan_run(config, inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)).learners[0]
    settings, spec = planned.settings, planned.replay.spec
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    limiter = planned.replay.limiter  # off: nothing inserts while the learner is timed
    replay, notice = dataclasses.replace(planned.replay, num_shards=shards, limiter=SamplesPerInsertLimiter(
        0.0, limiter.min_size, limiter.error_buffer)).build(device)
    rng = np.random.default_rng(config.seed)
    chunks = synthetic_chunks(spec, settings.prioritized, 8, rng)
    added = 0
    while min(shard.inserted for shard in replay.shards) < spec.rows:
        replay.add(added % shards, chunks[added % len(chunks)])
        added += 1
    learner = Learner(settings, device, replay, lambda weights: None)
    learner.warmup()
    groups, count = settings.accumulation_steps, settings.micro_batch
    start, draws = time.perf_counter(), 0
    while time.perf_counter() - start < min(seconds, 2.0):
        replay.draw(groups, count)
        draws += 1
    result = {"device": str(device), "replay_storage": replay.backend.name, "notice": notice, "shards": shards,
              "shape": f"{count}x{groups}", "prioritized": settings.prioritized,
              "draw_ms": 1e3 * (time.perf_counter() - start) / draws}
    result["memory_samples_per_s"], result["memory_gpu_busy"] = from_memory(learner, learner.feed.take(32), seconds)
    result["fed_samples_per_s"], result["fed_gpu_busy"] = timed_epochs(learner, seconds)
    result["fed_over_memory"] = result["fed_samples_per_s"] / result["memory_samples_per_s"]
    if with_profile:
        profiler = cProfile.Profile()
        profiler.runcall(timed_epochs, learner, seconds)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(10)
        result["profile"] = text.getvalue()
    return result


def main(argv: list[str] | None = None) -> int:
    """Print the figures as one JSON line (and the profile after it)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.feed_profile", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=config_path, help="a YAML file or a shipped config's name")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    parser.add_argument("--shards", type=int, default=None, help="shards (default: the config's collectors.num)")
    parser.add_argument("--seconds", type=float, default=4.0, help="clock per measurement")
    parser.add_argument("--profile", action="store_true", help="also cProfile the fed loop")
    args = parser.parse_intermixed_args(argv)
    try:
        config = load_config(args.config, args.overrides)
    except (ConfigError, UnsupportedEnv) as err:
        print(f"feed_profile: {err}", file=sys.stderr)
        return 2
    result = profile_feed(config, args.shards or config.collectors.num, args.seconds, args.profile)
    profile = result.pop("profile", None)
    print(json.dumps(result))
    if profile:
        print(profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
