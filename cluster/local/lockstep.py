"""`python -m raypex.cluster.local.lockstep`: a run's parts in lockstep in one process, without Ray.

The same Collector, ShardedReplay, limiter and Learner classes as `raypex train`, built
from the same plan (cluster/plan/topology.py) by the local wiring, run one after another: the collectors insert until the limiter has no more
room (in a real run they are faster than the learner and sit at that bound), the learner trains
one epoch, its newest weights reach the collectors and, once `eval.every_env_steps` more env steps
were collected, the evaluator. No asynchrony, no CPU contention: the updates it takes to reach `stop.eval_return`
say how much a config learns per update, over many seeds in little time, and comparing them with
a real run shows what the distributed run costs in updates. It is a research tool, not a way to
train (nothing is saved).

    python -m raypex.cluster.local.lockstep configs/cartpole.yaml --seeds 10 replay.error_buffer=2000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from raypex.actors.envs import EnvSpec, UnsupportedEnv, check_algo_fits, inspect_env
from raypex.cluster.config.loading import ConfigError, load_config
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.config.shipped import config_path
from raypex.cluster.driver.evaluation import mark_after
from raypex.cluster.local.wiring import build_local
from raypex.cluster.plan.settings import eval_give_up
from raypex.cluster.plan.topology import plan_run
from raypex.replay.contracts import Weights


def run_lockstep(config: RunConfig, spec: EnvSpec, max_updates: int) -> dict:
    """One seed: updates and env steps until an evaluation reaches stop.eval_return (or the caps)."""
    run = build_local(plan_run(config, spec))
    replay, collectors, learner = run.replay, run.collectors, run.learner

    def fill_to_the_insert_bound() -> None:
        for collector in collectors:
            while replay.insert_room() > 0:
                collector.collect_chunk()

    target = config.stop.eval_return
    give_up = eval_give_up(config)

    def evaluate(weights: Weights) -> float | None:
        return run.evaluator.evaluate(weights, give_up)["mean"]

    start = time.perf_counter()
    learner.publish_weights()
    result = None
    env_steps, every = 0, config.eval.every_env_steps
    next_mark = mark_after(0, every)
    while learner.updates < max_updates and env_steps < config.stop.env_steps:
        fill_to_the_insert_bound()
        learner.train_epoch()
        env_steps = sum(c.env_steps for c in collectors)
        if env_steps >= next_mark:
            next_mark = mark_after(env_steps, every)
            result = evaluate(run.weights.latest_weights)
            if target is not None and result is not None and result >= target:
                break
    solved = target is not None and result is not None and result >= target
    return {"seed": config.seed, "solved": solved, "updates": learner.updates, "env_steps": env_steps,
            "eval": result, "seconds": round(time.perf_counter() - start, 1),
            "inserted": replay.inserted, "sampled": replay.sampled}


def main(argv: list[str] | None = None) -> int:
    """Run seeds seed..seed+N-1 one after another; one JSON line each, then the median."""
    parser = argparse.ArgumentParser(prog="python -m raypex.cluster.local.lockstep", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=config_path, help="a YAML file or a shipped config's name")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds, from the config's seed on")
    parser.add_argument("--max-updates", type=int, default=15_000, help="give up on a seed after this many")
    args = parser.parse_intermixed_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
        check_algo_fits(config.algo.name, spec, config.env.id, config.network.flat_only)
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
