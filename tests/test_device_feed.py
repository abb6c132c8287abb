"""DeviceFeed: order, stacking, errors and shutdown of the feeder thread (CPU here; the pinned,
stream-copied path on CUDA where a GPU exists)."""

import itertools

import numpy as np
import pytest
import torch

from learner.device_feed import SLOTS, DeviceFeed
from replay.contracts import TrainingStopped

DEVICES = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])


def numbered_batches(size: int = 8):
    """Micro-batches whose every field holds the batch's number, pixels as uint8."""
    for number in itertools.count():
        yield {
            "obs": np.full((size, 2, 3, 3), number % 256, np.uint8),
            "action": np.full(size, number, np.int64),
            "return": np.full(size, number, np.float32),
            "discount": np.full(size, 0.5, np.float32),
            "next_obs": np.full((size, 2, 3, 3), (number + 1) % 256, np.uint8),
        }


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("threads", [0, 1])
def test_updates_come_in_order_stacked_per_micro_batch(device, threads):
    source = numbered_batches()
    feed = DeviceFeed(lambda: next(source), device, micro_batches=3, threads=threads)
    try:
        for update in range(2 * SLOTS + 1):  # every slot used more than once
            batch = feed.next_update()
            assert batch["obs"].shape == (3, 8, 2, 3, 3) and batch["obs"].dtype == torch.uint8
            assert batch["obs"].device.type == device.type
            assert batch["action"][:, 0].tolist() == [3 * update, 3 * update + 1, 3 * update + 2]
            assert batch["next_obs"][2, 0, 0, 0, 0].item() == (3 * update + 3) % 256
            done = None
            if device.type == "cuda":
                done = torch.cuda.Event()
                done.record()
            feed.release(done)
    finally:
        feed.close()


@pytest.mark.parametrize("threads", [0, 1])
def test_a_source_error_is_raised_by_every_later_call(threads):
    source = numbered_batches()
    calls = itertools.count()

    def next_batch():
        if next(calls) == 4:
            raise TrainingStopped("the run is stopping")
        return next(source)

    feed = DeviceFeed(next_batch, torch.device("cpu"), micro_batches=2, threads=threads)
    feed.next_update()
    feed.release(None)
    feed.next_update()
    feed.release(None)
    for _ in range(2):
        with pytest.raises(TrainingStopped):
            feed.next_update()


@pytest.mark.parametrize("threads", [1, 3])
def test_close_ends_the_feeder_threads(threads):
    source = numbered_batches()
    feed = DeviceFeed(lambda: next(source), torch.device("cpu"), micro_batches=1, threads=threads)
    feed.next_update()
    feed.close(timeout_s=30)
    assert len(feed._threads) == threads and not any(t.is_alive() for t in feed._threads)


def test_several_feeder_threads_hand_out_every_batch_once():
    source = numbered_batches()
    feed = DeviceFeed(lambda: next(source), torch.device("cpu"), micro_batches=2, threads=3)
    try:
        updates = []
        for _ in range(12):
            updates.append(feed.next_update()["action"][:, 0].tolist())
            feed.release(None)
        # Threads may finish out of fetch order; each update's micro-batches were fetched together.
        assert all(second == first + 1 and first % 2 == 0 for first, second in updates)
        seen = [number for update in updates for number in update]
        assert len(set(seen)) == len(seen)  # none repeated
    finally:
        feed.close()


def test_take_batches_reads_the_source_beside_the_feeder_thread():
    source = numbered_batches()
    feed = DeviceFeed(lambda: next(source), torch.device("cpu"), micro_batches=1, threads=1)
    try:
        feed.next_update()
        taken = feed.take_batches(5)
        numbers = [int(b["action"][0]) for b in taken]
        assert numbers == list(range(numbers[0], numbers[0] + 5))  # consecutive: no interleaving
    finally:
        feed.close()
