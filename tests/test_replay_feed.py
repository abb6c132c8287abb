"""ReplayFeed: batches drawn from the replay in the learner's process, the wait for the limiter,
the stop, and (where CUDA exists) the same draws gathered on the GPU from device columns."""

import threading

import numpy as np
import pytest
import torch

from raypex.learner.replay_feed import HOST_DRAW_AHEAD, ReplayFeed
from raypex.replay.contracts import TrainingStopped
from raypex.replay.priorities import BetaSchedule, PrioritySettings
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.shard import StorageSpec
from raypex.replay.sharded import Draw, ShardedReplay

CPU = torch.device("cpu")


def chunk(start: int, count: int) -> dict:
    """Transitions whose every field names them (start, start+1, ...), pixels as uint8."""
    ids = np.arange(start, start + count)
    return {"obs": np.broadcast_to((ids % 256).astype(np.uint8)[:, None, None, None], (count, 2, 3, 3)).copy(),
            "action": ids.astype(np.int64), "return": ids.astype(np.float32),
            "discount": np.full(count, 0.5, np.float32),
            "next_obs": np.broadcast_to(((ids + 1) % 256).astype(np.uint8)[:, None, None, None], (count, 2, 3, 3)).copy(),
            "priority": np.ones(count, np.float32)}


def replay(limiter: SamplesPerInsertLimiter, prioritized: bool = False, backend=None) -> ShardedReplay:
    return ShardedReplay(2, StorageSpec(100, (2, 3, 3), "uint8"), limiter, 0,
                         PrioritySettings() if prioritized else None, BetaSchedule(0.4, 100, 1) if prioritized else None,
                         backend)


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_batch_is_whole_transitions_of_every_field_stacked_per_micro_batch(prioritized):
    rep = replay(SamplesPerInsertLimiter(0.0, 10, 1), prioritized)
    rep.add(0, chunk(0, 40))
    rep.add(1, chunk(100, 40))
    feed = ReplayFeed(rep, CPU, micro_batches=3, micro_batch=8)
    with feed.update_slot() as batch:
        assert batch["obs"].shape == (3, 8, 2, 3, 3) and batch["obs"].dtype == torch.uint8
        ids = batch["action"]
        assert torch.equal(batch["return"], ids.float())
        assert torch.equal(batch["obs"][:, :, 0, 0, 0], (ids % 256).to(torch.uint8))
        assert torch.equal(batch["next_obs"][:, :, 1, 2, 2], ((ids + 1) % 256).to(torch.uint8))
        assert ("weight" in batch) == prioritized
    assert (feed.keys is not None) == prioritized
    if prioritized:
        assert feed.keys.row.shape == (3, 8)
    assert rep.sampled == 24


def test_the_feed_waits_for_an_insert_the_limiter_needs_and_stops_when_told():
    # spi 1, min_size 16, error_buffer 8: once 20 are inserted, 20 - (16 - 8) = 12 samples are allowed
    rep = replay(SamplesPerInsertLimiter(1.0, min_size=16, error_buffer=8))
    stop = threading.Event()
    feed = ReplayFeed(rep, CPU, micro_batches=1, micro_batch=8, should_stop=stop.is_set)
    inserter = threading.Thread(target=lambda: [rep.add(i % 2, chunk(10 * i, 10)) for i in range(2)])
    inserter.start()  # replay reaches its minimum on another thread, as collectors' chunks do
    with feed.update_slot() as batch:
        assert batch["action"].shape == (1, 8)
    inserter.join()
    assert feed.wait_s == 0  # any wait was while replay filled
    assert not rep.can_sample(8)  # the next update must wait for inserts that will not come
    stop.set()
    with pytest.raises(TrainingStopped), feed.update_slot():
        pass
    assert rep.sampled == 8


def test_the_benchs_reference_batches_are_drawn_past_the_limiter():
    """`take` keeps real batches for the bench's from-memory reference; it runs after the
    collectors stopped, so it must not wait for an insert that will never come."""
    rep = replay(SamplesPerInsertLimiter(1.0, min_size=16, error_buffer=8))
    rep.add(0, chunk(0, 20))
    feed = ReplayFeed(rep, CPU, micro_batches=2, micro_batch=8)
    assert rep.can_sample(12) and not rep.can_sample(13)  # fewer than the 48 taken below
    batches = feed.take(3)
    assert len(batches) == 3 and all(b["action"].shape == (2, 8) for b in batches) and rep.sampled == 48


def test_in_one_process_the_feed_lets_the_collectors_run_while_starved():
    rep = replay(SamplesPerInsertLimiter(1.0, min_size=20, error_buffer=4))
    added = []

    def collect() -> None:
        rep.add(len(added) % 2, chunk(len(added) * 10, 10))
        added.append(1)

    feed = ReplayFeed(rep, CPU, micro_batches=2, micro_batch=8, starved=collect)
    for _ in range(5):
        with feed.update_slot():
            pass
    # samples may run error_buffer ahead of inserts past min_size, and the collectors ran only as needed
    slack = rep.limiter.min_size - rep.limiter.error_buffer
    assert rep.sampled == 80 and rep.inserted - slack >= rep.sampled > rep.inserted - 10 - slack
    assert len(added) == rep.inserted // 10


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the device columns")
@pytest.mark.parametrize("prioritized", [False, True])
def test_on_the_gpu_only_indices_travel_and_the_gather_there_matches_the_host(prioritized):
    from raypex.learner.device_columns import DeviceColumns
    from raypex.learner.replay_feed import gather_from

    cuda = torch.device("cuda")
    host, device = (replay(SamplesPerInsertLimiter(0.0, 10, 1), prioritized, backend)
                    for backend in (None, DeviceColumns(cuda)))
    for rep in (host, device):
        rep.add(0, chunk(0, 60))
        rep.add(1, chunk(100, 30))
    feed = ReplayFeed(device, cuda, micro_batches=2, micro_batch=16)
    assert feed.on_device
    with feed.update_slot() as batch:
        assert set(batch) == {"row"} | ({"weight"} if prioritized else set())
        fields = gather_from(device)(batch)
        ids = fields["action"].cpu()
        index = {key: value.cpu().numpy() for key, value in batch.items() if key != "weight"}
    assert torch.equal(fields["return"].cpu(), ids.float())
    assert torch.equal(fields["obs"][:, :, 0, 0, 0].cpu(), (ids % 256).to(torch.uint8))
    # the same rows gathered on the host from a replay holding the same transitions: every field equal
    expected = host.gather(Draw(index))
    assert set(fields) - {"weight"} == set(expected)
    for field, values in expected.items():
        np.testing.assert_array_equal(fields[field].cpu().numpy(), values, err_msg=field)
    assert set(ids.ravel().tolist()) <= set(range(60)) | set(range(100, 130))


def test_a_cpu_learner_draws_the_next_updates_together_within_the_epoch_and_the_limiter():
    rep = replay(SamplesPerInsertLimiter(0.0, 10, 1))  # no ratio: every draw is allowed
    rep.add(0, chunk(0, 40))
    rep.add(1, chunk(100, 40))
    feed = ReplayFeed(rep, CPU, micro_batches=2, micro_batch=8)
    assert feed.draw_ahead == HOST_DRAW_AHEAD > 1
    handed = []
    for left in (3, 2, 1):  # an epoch's last three updates: one draw for the three
        with feed.update_slot(updates_left=left) as batch:
            handed.append(batch["action"].clone())
        assert rep.sampled == 3 * 16
    assert all(b.shape == (2, 8) for b in handed) and len({tuple(b.flatten().tolist()) for b in handed}) == 3
    with feed.update_slot(updates_left=100):
        assert rep.sampled == 3 * 16 + HOST_DRAW_AHEAD * 16  # never more than HOST_DRAW_AHEAD at once

    # spi 1, min_size 16, error_buffer 8: 40 inserted allow 40 - 8 = 32 samples, two updates of 16
    limited = replay(SamplesPerInsertLimiter(1.0, min_size=16, error_buffer=8))
    limited.add(0, chunk(0, 40))
    feed = ReplayFeed(limited, CPU, micro_batches=2, micro_batch=8)
    with feed.update_slot(updates_left=25):
        assert limited.sampled == 32  # 8 would have passed the limiter: halved to what it allows
    assert not limited.can_sample(1)

    prioritized = replay(SamplesPerInsertLimiter(0.0, 10, 1), prioritized=True)
    prioritized.add(0, chunk(0, 40))
    feed = ReplayFeed(prioritized, CPU, micro_batches=2, micro_batch=8)
    with feed.update_slot(updates_left=25):
        assert prioritized.sampled == 16 and feed.keys.row.shape == (2, 8)  # priorities change per update
