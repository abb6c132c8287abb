"""What a shared replay budget would cost collectors that come and go (collectors.num auto).

Two ways keep the replay within its configured total as collectors join and leave: a fixed pool
of slots (collectors.max shards of replay.capacity each; what raypex does, cluster/plan/elastic.py)
or one budget shared by the shards present, which resizes every shard at each join and leave.
Resizing keeps each shard's newest rows in arrays of the new size: a copy of the replay's bytes
(all of them, less the rows dropped), made under the replay's lock, so the learner's draws and
every collector's inserts wait for it. This times that copy at each shipped config's replay
size (its shards full), one round after another, in this process.

    python -m benchmarks.replay_resize [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from raypex.actors.envs import inspect_env
from raypex.cluster.config.arguments import config_path
from raypex.cluster.config.loading import load_config
from raypex.cluster.plan.env_fit import replay_bytes

CONFIGS = ("cartpole", "minatar", "hopper")


def copy_s(nbytes: int, rounds: int) -> list[float]:
    """Seconds to copy `nbytes` of filled replay into fresh arrays, per round."""
    replay = np.ones(nbytes, np.uint8)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        resized = replay.copy()
        times.append(time.perf_counter() - start)
        del resized
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'config':<10} {'replay':>10}  copy per resize (s), each round")
    for name in CONFIGS:
        config = load_config(config_path(name), [])
        spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
        nbytes = replay_bytes(config, spec)
        rounds = " ".join(f"{s:.3f}" for s in copy_s(nbytes, args.rounds))
        print(f"{name:<10} {nbytes / 1e9:>8.2f} GB  {rounds}")


if __name__ == "__main__":
    main()
