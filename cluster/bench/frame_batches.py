"""`python -m cluster.bench.frame_batches`: what a pixel batch costs the shard that serves it.

A FrameStorage of Pong's shape (8 envs x 31,250 slots of 84x84 frames, stack 4, n-step 3) is
filled with random frames in episodes of 2,000 frames, then micro-batches are sampled both ways:
whole obs and next_obs stacks (`gather`, what shards sent before) and frames once
(`sample_batches`, what they send now). Prints the median time per call and the bytes per
sampled transition. No Ray: the shard's own work only.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from replay.frames import FrameStorage

ENVS, SLOTS, FRAME, STACK, N_STEP, EPISODE = 8, 31_250, (84, 84), 4, 3, 2_000


def frame_chunk(first: int, frames: np.ndarray) -> dict:
    """A Pong-shaped FrameChunk of `frames` [F, ENVS, *FRAME] numbered from `first`, in episodes of
    EPISODE frames, with one transition per frame whose next_obs is N_STEP frames later."""
    numbers = np.arange(first, first + len(frames))
    starts = np.tile(numbers[:-N_STEP], ENVS)
    return {
        "frames": frames,
        "frame_step": np.repeat((numbers % EPISODE)[:, None], ENVS, axis=1).astype(np.int32),
        "first_index": first, "env": np.repeat(np.arange(ENVS), len(frames) - N_STEP), "obs": starts,
        "action": np.zeros(len(starts), np.int64), "return": np.zeros(len(starts), np.float32),
        "discount": np.ones(len(starts), np.float32), "next_obs": starts + N_STEP,
    }


def filled_storage(seed: int = 0) -> FrameStorage:
    """A Pong-shaped storage filled once over with random frames and transitions n-step apart."""
    storage = FrameStorage(ENVS * SLOTS, ENVS, FRAME, STACK, n_step=N_STEP)
    rng = np.random.default_rng(seed)
    chunk = 100
    for first in range(0, storage.slots + chunk, chunk):
        storage.add(frame_chunk(first, rng.integers(0, 256, (chunk, ENVS, *FRAME), dtype=np.uint8)))
    return storage


def measure(storage: FrameStorage, groups: int, count: int, repeats: int) -> list[dict]:
    """Median ms per sample call and bytes per transition, whole stacks vs frames once."""
    rng = np.random.default_rng(1)

    def whole(rows: np.ndarray) -> dict:
        return storage.gather(rows.reshape(-1))

    rows_out = []
    for name, sample in (("whole stacks", whole), ("frames once", storage.sample_batches)):
        times, nbytes = [], 0
        for _ in range(repeats):
            rows = storage.sample_rows(groups * count, rng).reshape(groups, count)
            start = time.perf_counter()
            batch = sample(rows)
            times.append(time.perf_counter() - start)
            nbytes = sum(array.nbytes for array in batch.values())
        rows_out.append({"form": name, "shape": f"{groups}x{count}", "ms": 1e3 * float(np.median(times)),
                         "bytes_per_transition": nbytes / (groups * count)})
    return rows_out


def main(argv: list[str] | None = None) -> int:
    """Print the table for the given micro-batch shapes."""
    parser = argparse.ArgumentParser(prog="python -m cluster.bench.frame_batches", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="4x512,4x128", help="micro-batches per call x transitions each")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    storage = filled_storage()
    print(f"{'shape':>6}  {'form':<13} {'ms per call':>11}  {'bytes per transition':>20}")
    for shape in args.shapes.split(","):
        groups, count = (int(x) for x in shape.split("x"))
        for row in measure(storage, groups, count, args.repeats):
            print(f"{row['shape']:>6}  {row['form']:<13} {row['ms']:>11.1f}  {row['bytes_per_transition']:>20,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
