"""`python -m cluster.bench.fetch_path`: how fast one learner thread can take pixel micro-batches
from the shards through Ray, with nothing else running.

N shard actors of Pong's shape (8 envs, stack 4, n-step 3, frames once) are filled with random
frames once, then one BatchSource (the learner's, cluster/hosts/ray_seams.py) takes micro-batches
from them for a few seconds per setting of its request group (how many micro-batches are drawn,
and requested from their shards, at once). No collectors, no learner, no GPU: this is the Ray
side of the learner's feed alone, so a fed learner slower than this is bound by something else.

Per group it prints micro-batches and samples per second, the fetching thread's CPU milliseconds
per micro-batch (what the feeder thread spends that the update loop cannot overlap), and the
share of time it waited for replies (near 1: the shards are the bound). `--copy` also copies each
micro-batch into preallocated host memory on the same thread, as the learner's feed does into
pinned memory (one torch thread). Example:

    python -m cluster.bench.fetch_path --shards 12 --groups 4,32 --copy
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from cluster.bench.frame_batches import ENVS, FRAME, N_STEP, STACK, frame_chunk
from replay.rate_limit import SamplesPerInsertLimiter

CHUNK = 100  # frames per env in each chunk the shards are filled with
UNLIMITED = SamplesPerInsertLimiter(0.0, 1, 0)  # no replay ratio: the fetch path alone is measured


def start_filled_shards(count: int, capacity: int) -> list:
    """`count` ShardActors of Pong's shape, each filled once over (the same random frames: the
    sampling cost does not depend on their content)."""
    import ray

    from cluster.hosts.shard_actor import ShardActor
    from replay.shard import StorageSpec

    spec = StorageSpec(capacity, (STACK, *FRAME), "uint8", frame_stack=STACK, num_envs=ENVS, n_step=N_STEP)
    shards = [ray.remote(ShardActor).options(num_cpus=0.01).remote(i, spec, UNLIMITED, i) for i in range(count)]
    frames = np.random.default_rng(0).integers(0, 256, (CHUNK, ENVS, *FRAME), dtype=np.uint8)
    for first in range(0, capacity // ENVS + CHUNK, CHUNK):
        ray.get([shard.add.remote(frame_chunk(first, frames)) for shard in shards])
    return shards


def measure(shards: list, micro_batch: int, group: int, seconds: float, copy: bool) -> dict:
    """One BatchSource drawing `group` micro-batches per request round, for `seconds`."""
    import torch

    from cluster.hosts.ray_seams import BatchSource
    from replay.mixing import ShardMixer

    mixer = ShardMixer(len(shards), micro_batch, UNLIMITED, seed=0)
    source = BatchSource(shards, mixer, depth=2 * group)
    buffers: dict[str, torch.Tensor] = {}
    for _ in range(2 * group):  # the first replies, off the clock
        source.next_batch()
    waited, taken = source.wait_s, 0
    start, cpu_start = time.perf_counter(), time.thread_time()
    while time.perf_counter() - start < seconds:
        batch = source.next_batch()
        if copy:
            for name, array in batch.items():
                tensor = torch.from_numpy(np.asarray(array))
                if name not in buffers:
                    buffers[name] = torch.empty_like(tensor)
                buffers[name].copy_(tensor)
        taken += 1
    elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
    return {"group": group, "micro_batches_per_s": taken / elapsed, "samples_per_s": taken * micro_batch / elapsed,
            "thread_cpu_ms_per_micro_batch": 1e3 * cpu / taken, "reply_wait_fraction": (source.wait_s - waited) / elapsed}


def main(argv: list[str] | None = None) -> int:
    """Start a local Ray cluster, fill the shards, measure each group size, print a table."""
    parser = argparse.ArgumentParser(prog="python -m cluster.bench.fetch_path", description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--capacity", type=int, default=8000, help="transitions per shard")
    parser.add_argument("--micro-batch", type=int, default=128)
    parser.add_argument("--groups", default="4,32", help="request group sizes to measure, e.g. 4,32")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--copy", action="store_true", help="also copy each micro-batch on the fetching thread")
    args = parser.parse_args(argv)
    groups = [int(g) for g in args.groups.split(",")]
    import ray
    import torch

    torch.set_num_threads(1)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        shards = start_filled_shards(args.shards, args.capacity)
        print(f"{args.shards} shards x {args.capacity} transitions, micro-batch {args.micro_batch}"
              f"{', copied on the fetching thread' if args.copy else ''}")
        print("group  micro-batches/s  samples/s  thread CPU ms/micro-batch  reply wait")
        for group in groups:
            r = measure(shards, args.micro_batch, group, args.seconds, args.copy)
            print(f"{group:5d}  {r['micro_batches_per_s']:15,.0f}  {r['samples_per_s']:9,.0f}  "
                  f"{r['thread_cpu_ms_per_micro_batch']:25.3f}  {r['reply_wait_fraction']:10.2f}", flush=True)
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
