"""`python -m cluster.bench.ale_async`: does ALE's asynchronous mode let a collector act on one
half of its envs while the other half emulates?

Three loops over the same ALE vector env shape (Pong, frames stacked by ALE itself, one emulation
thread), each for a few seconds, in this process:
- raw: the env alone, fixed actions (the reference, as `raypex bench`'s env_raw);
- sync: a oneDNN-fused bf16 Nature CNN acts on all envs, then the env steps them all (how a
  collector runs today);
- halves: the env in async mode with `batch_size` half its envs; each `recv` returns one half, the
  network acts on it and `send` starts it again, so that half acts while the other emulates.
It prints env steps/s and each loop's ratio to raw. Measured on the 2-core box (BENCHMARKS.md,
"Acting through a oneDNN-fused trace"): the halves gain with a whole core to spare (3-6% one day,
1.4-1.7x on a slower day, still less per core than two synchronous collectors) and never beat
the synchronous loop on one core, which is what a collector has, so collectors stay synchronous.
Run it under `taskset -c 0` for one core.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

GAME = "pong"
STACK = 4


def _env(num_envs: int, batch_size: int = 0):
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv(GAME, num_envs, batch_size=batch_size, num_threads=1, stack_num=STACK,
                          reward_clipping=False)


def _acting_forward(batch: int):
    """Pong's Q-network as a collector acts with it here: bf16, traced with oneDNN fusion (the
    collectors' own ActingPolicy, both choices forced)."""
    import torch

    from actors.acting import ActingPolicy
    from learner.networks import build_q_network

    torch.set_num_threads(1)
    network = build_q_network((STACK, 84, 84), 6, [512], True, "uint8")
    return ActingPolicy(network, "bf16", np.zeros((batch, STACK, 84, 84), np.uint8), "on").greedy


def raw_steps_per_s(num_envs: int, seconds: float) -> float:
    """The env alone with fixed actions."""
    env = _env(num_envs)
    env.reset(seed=0)
    actions, steps, start = np.zeros(num_envs, np.int64), 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions)
        steps += num_envs
    env.close()
    return steps / (time.perf_counter() - start)


def sync_steps_per_s(num_envs: int, seconds: float) -> float:
    """Act on every env, then step every env."""
    env, greedy = _env(num_envs), _acting_forward(num_envs)
    obs, _ = env.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs, *_ = env.step(greedy(obs))
        steps += num_envs
    env.close()
    return steps / (time.perf_counter() - start)


def halves_steps_per_s(num_envs: int, seconds: float) -> tuple[float, int]:
    """Async mode, half the envs per recv/send; also how many distinct envs were served (all of
    them, or the loop kept stepping one half only)."""
    half = num_envs // 2
    env, greedy = _env(num_envs, half), _acting_forward(half)
    obs, _ = env.reset(seed=0)  # async: one half's first observations; the other half comes from recv
    env.send(greedy(obs))
    # The other half's first observations wait for its reset (a quarter second for Pong): take
    # them before the clock starts, so a short loop times steady stepping, not one reset.
    obs, _, _, _, info = env.recv()
    served: set[int] = set(info["env_id"].tolist())
    env.send(greedy(obs))
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs, _, _, _, info = env.recv()
        served.update(info["env_id"].tolist())
        env.send(greedy(obs))
        steps += half
    env.close()
    return steps / (time.perf_counter() - start), len(served)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Print and return the three rates and the two ratios."""
    parser = argparse.ArgumentParser(prog="python -m cluster.bench.ale_async", description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=32, help="envs in the vector env (even; default 32)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per loop (default 8)")
    args = parser.parse_args(argv)
    if args.envs < 2 or args.envs % 2:
        parser.error(f"--envs must be an even number >= 2, got {args.envs}")
    raw = raw_steps_per_s(args.envs, args.seconds)
    sync = sync_steps_per_s(args.envs, args.seconds)
    halves, served = halves_steps_per_s(args.envs, args.seconds)
    print(f"raw {raw:,.0f} env steps/s | sync {sync:,.0f} ({sync / raw:.3f} of raw) | "
          f"halves {halves:,.0f} ({halves / raw:.3f} of raw, {served} of {args.envs} envs served)")
    return {"raw": raw, "sync": sync, "halves": halves, "served": served}


if __name__ == "__main__":
    main()
