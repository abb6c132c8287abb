"""`python -m cluster.local.lockstep`: a run's parts in lockstep in one process, without Ray.

The same Collector, ReplayShard, limiter, ShardMixer and Learner classes as `raypex train`, built
from the same config, run one after another: the collectors insert until the limiter has no more
room (in a real run they are faster than the learner and sit at that bound), the learner trains
one epoch, its newest weights reach the collectors and, every `eval.every_epochs` epochs, the
evaluator. No asynchrony, no CPU contention: the updates it takes to reach `stop.eval_return`
say how much a config learns per update, over many seeds in little time, and comparing them with
a real run shows what the distributed run costs in updates. It is a research tool, not a way to
train (nothing is saved).

    python -m cluster.local.lockstep configs/cartpole.yaml --seeds 10 replay.error_buffer=2000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from actors.envs import EnvSpec, UnsupportedEnv, inspect_env
from cluster.config.loading import ConfigError, load_config
from cluster.config.schema import RunConfig
from cluster.config.settings import (
    collector_settings,
    eval_give_up,
    evaluator_args,
    learner_limiter,
    learner_settings,
    shard_limiter,
    storage_spec,
)
from replay.contracts import Weights
from replay.mixing import ShardMixer
from replay.shard import ReplayShard


def run_lockstep(config: RunConfig, spec: EnvSpec, max_updates: int) -> dict:
    """One seed: updates and env steps until an evaluation reaches stop.eval_return (or the caps)."""
    import torch

    from actors.collector import Collector
    from cluster.hosts.evaluator_actor import EvaluatorActor  # a plain class; Ray only hosts it in a run
    from learner.learner import Learner

    torch.set_num_threads(1)
    num = config.collectors.num
    shards = [ReplayShard(i, storage_spec(config, spec), shard_limiter(config), config.seed + i) for i in range(num)]
    latest: list[Weights | None] = [None]
    collectors = [Collector(collector_settings(config, spec, i), shards[i].add, lambda: latest[0]) for i in range(num)]
    mixer = ShardMixer(num, config.learner.micro_batch, learner_limiter(config), config.seed)

    def fill_to_the_insert_bound() -> None:
        for shard, collector in zip(shards, collectors):
            while shard.counters()["insert_room"] > 0:
                collector.collect_chunk()

    def next_batch() -> dict:
        for shard in shards:
            mixer.observe(shard.counters())
        while (shard_index := mixer.next_shard()) is None:  # only if the slack is below one epoch
            for collector in collectors:
                collector.collect_chunk()
            for shard in shards:
                mixer.observe(shard.counters())
        batch, _ = shards[shard_index].sample(config.learner.micro_batch, 1)
        return {name: array[0] for name, array in batch.items()}

    learner = Learner(learner_settings(config, spec), torch.device("cpu"), next_batch,
                      lambda weights: latest.__setitem__(0, weights))
    evaluator = EvaluatorActor(*evaluator_args(config, spec))
    target = config.stop.eval_return
    give_up = eval_give_up(config)

    def evaluate(weights: Weights) -> float | None:
        return evaluator.evaluate(weights.arrays, weights.version, give_up)["mean"]

    start = time.perf_counter()
    learner.publish_weights()
    result = None
    env_steps = 0
    while learner.updates < max_updates and env_steps < config.stop.env_steps:
        fill_to_the_insert_bound()
        learner.train_epoch()
        env_steps = sum(c.env_steps for c in collectors)
        if learner.epochs % config.eval.every_epochs == 0:
            result = evaluate(latest[0])
            if target is not None and result is not None and result >= target:
                break
    solved = target is not None and result is not None and result >= target
    return {"seed": config.seed, "solved": solved, "updates": learner.updates, "env_steps": env_steps,
            "eval": result, "seconds": round(time.perf_counter() - start, 1),
            "inserted": sum(s.storage.total_added for s in shards), "sampled": sum(s.sampled for s in shards)}


def main(argv: list[str] | None = None) -> int:
    """Run seeds seed..seed+N-1 one after another; one JSON line each, then the median."""
    parser = argparse.ArgumentParser(prog="python -m cluster.local.lockstep", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds, from the config's seed on")
    parser.add_argument("--max-updates", type=int, default=15_000, help="give up on a seed after this many")
    args = parser.parse_intermixed_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    except (ConfigError, UnsupportedEnv) as err:
        print(f"lockstep: {err}", file=sys.stderr)
        return 2
    rows = []
    for seed in range(config.seed, config.seed + args.seeds):
        row = run_lockstep(load_config(args.config, [*args.overrides, f"seed={seed}"]), spec, args.max_updates)
        print(json.dumps(row), flush=True)
        rows.append(row)
    counted = sorted(r["updates"] if r["solved"] else float("inf") for r in rows)
    print(f"solved {sum(r['solved'] for r in rows)}/{len(rows)}, median updates to solve "
          f"{statistics.median(counted):g}, sorted {counted}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
