"""How fast a Learner trains when data costs nothing to get: the references `raypex bench` holds
the replay-fed learner against (no Ray here).

- from memory: batches already made (real draws kept by ReplayFeed.take, or random ones), cycled
  through the same epoch loop a run uses, with nothing drawn or gathered on the host;
- on device: batches already on the device, the update alone.
The GPU's busy fraction is NVML's utilization sampled while the clock runs.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from raypex.learner.learner import Learner

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


class CycledFeed:
    """A feed with ReplayFeed's interface that hands out `batches` in a cycle (no draws, no keys)."""

    stops_with_its_group = False

    def __init__(self, batches: list[dict[str, torch.Tensor]], on_device: bool):
        self._batches = itertools.cycle(batches)
        self.on_device = on_device
        self.keys = None
        self.wait_s = self.fill_wait_s = 0.0

    @contextlib.contextmanager
    def update_slot(self, updates_left: int = 1) -> Iterator[dict[str, torch.Tensor]]:
        """The next batch of the cycle (`updates_left` as ReplayFeed's; nothing is drawn here)."""
        yield next(self._batches)


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


def from_memory(learner: Learner, batches: list[dict[str, torch.Tensor]], seconds: float) -> tuple[float, float | None]:
    """(samples/s, GPU busy) of the learner's epoch loop fed from `batches` in a cycle."""
    own = learner.feed
    learner.feed = CycledFeed(batches, own.on_device)
    try:
        learner.train_epoch()  # off the clock
        return timed_epochs(learner, seconds)
    finally:
        learner.feed = own


def on_device(learner: Learner, seconds: float) -> tuple[float, float | None]:
    """(samples/s, GPU busy) of updates alone, from random batches already on the device."""
    on = [learner.example_batch(np.random.default_rng(seed)) for seed in range(4)]
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
