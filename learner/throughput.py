"""How fast a Learner trains when data costs nothing to get: the references `raypex bench` holds
the Ray-fed learner against (no Ray here).

- from memory: real or random numpy micro-batches already in this process, through the same
  DeviceFeed a run uses (the feeder thread, pinned copies, host-to-device copies);
- on device: batches already on the device, the update alone.
The GPU's busy fraction is NVML's utilization sampled while the clock runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from learner.device_feed import DeviceFeed
from learner.learner import Learner
from learner.synthetic import synthetic_batch
from replay.contracts import Batch

_BUSY_SAMPLE_S = 0.1


@contextmanager
def gpu_busy(device: torch.device) -> Iterator[list[float]]:
    """Samples NVML's utilization (0..1) of `device` every 0.1 s into the yielded list (stays
    empty on CPU or without NVML)."""
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(_BUSY_SAMPLE_S):
            samples.append(torch.cuda.utilization(device) / 100.0)

    thread = None
    if device.type == "cuda":
        try:
            torch.cuda.utilization(device)
            thread = threading.Thread(target=sample, daemon=True)
            thread.start()
        except (ImportError, ModuleNotFoundError, RuntimeError):
            pass
    try:
        yield samples
    finally:
        stop.set()
        if thread is not None:
            thread.join()


def random_micro_batches(learner: Learner, count: int, seed: int = 0) -> list[Batch]:
    """`count` random numpy micro-batches shaped as replay serves them (uint8 pixels)."""
    rng = np.random.default_rng(seed)
    single = dataclasses.replace(learner.s, accumulation_steps=1)
    cpu = torch.device("cpu")
    return [{name: t[0].numpy() for name, t in synthetic_batch(single, cpu, rng).items()} for _ in range(count)]


def timed_epochs(learner: Learner, seconds: float) -> tuple[float, float | None]:
    """(samples/s, mean GPU busy) of whole epochs run until `seconds` have passed."""
    per_update = learner.s.micro_batch * learner.s.accumulation_steps
    first = learner.updates
    with gpu_busy(learner.device) as busy:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            learner.train_epoch()  # ends with a read of the loss sums: the GPU's work is inside
        elapsed = time.perf_counter() - start
    return (learner.updates - first) * per_update / elapsed, (float(np.mean(busy)) if busy else None)


def from_memory(learner: Learner, batches: list[Batch], seconds: float) -> tuple[float, float | None]:
    """(samples/s, GPU busy) of the learner's epoch loop fed from `batches` in a cycle."""
    source = itertools.cycle(batches)
    own = learner.feed
    learner.feed = DeviceFeed(lambda: next(source), learner.device, learner.s.accumulation_steps, own.threads)
    try:
        learner.train_epoch()  # the new feed's first batches, off the clock
        return timed_epochs(learner, seconds)
    finally:
        learner.feed.close()
        learner.feed = own


def on_device(learner: Learner, seconds: float) -> tuple[float, float | None]:
    """(samples/s, GPU busy) of updates alone, from batches already on the device."""
    on = [synthetic_batch(learner.s, learner.device, np.random.default_rng(seed)) for seed in range(4)]
    per_update = learner.s.micro_batch * learner.s.accumulation_steps
    sync = torch.cuda.synchronize if learner.device.type == "cuda" else (lambda: None)
    for batch in on:
        learner.update(batch)
    sync()
    updates = 0
    with gpu_busy(learner.device) as busy:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for batch in on:
                learner.update(batch)
            updates += len(on)
            sync()
        elapsed = time.perf_counter() - start
    return updates * per_update / elapsed, (float(np.mean(busy)) if busy else None)
