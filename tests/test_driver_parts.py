"""Driver-side pieces without a cluster: checkpoints, the TensorBoard writer, metrics, progress."""

import dataclasses
import io
import json
import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from raypex.cluster.commands.cli import main
from raypex.cluster.config.loading import load_config
from raypex.cluster.driver.checkpoints import discard_parts, list_checkpoints, load_latest, replay_file, save_checkpoint
from raypex.cluster.driver.evaluation import EvaluationScheduler, Taken
from raypex.cluster.driver.metrics import RunMetrics
from raypex.cluster.driver.outcome import PolicyFile, RunOutcome
from raypex.cluster.driver.outputs import RunOutputs
from raypex.cluster.ray_runtime.placement import (
    PlacementError,
    ResourceRequest,
    best_learner_node,
    check_cpus_fit_one_node,
    check_fits,
    pair_strategy,
    room_beside_learner,
)
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.ray_runtime.reaper import cluster_processes, reap, still_running
from raypex.cluster.driver.signals import Terminated, exit_code, install_stop_signals, signal_name
from raypex.cluster.driver.startup import PHASES, StartupTimeline
from raypex.cluster.driver.tensorboard_log import TensorBoardLog
from raypex.cluster.local.runtime import LocalRuntime
from raypex.cluster.storage import OutputNotWritten, read_replay, write_replay
from raypex.replay.contracts import CollectorStats, EpochStats, ShardStats
from raypex.replay.digest import content_digest


def learner_bytes(tag: int, size: int = 4) -> bytes:
    """What a learner's state is saved as (torch.save of tensors in dicts), told apart by `tag`."""
    buffer = io.BytesIO()
    torch.save({"tag": tag, "step": {"weight": torch.full((size,), float(tag))}}, buffer)
    return buffer.getvalue()


def write_set(directory, epoch: int, keep: int, replay: list[dict] | None = None) -> None:
    """A checkpoint set as a run writes it: each shard's file first (where the shard lives), then
    the learner's state and the manifest."""
    parts = None if replay is None else [write_replay(replay_file(directory, epoch, i), state)
                                         for i, state in enumerate(replay)]
    save_checkpoint(directory, epoch, learner_bytes(epoch), {"epochs": epoch, "env_steps": 10 * epoch, "wall_s": 1.0},
                    keep=keep, replay_parts=parts)


def test_checkpoints_keep_the_newest_and_load_the_latest(tmp_path):
    # what a removal stopped by a signal left of an older set: its manifest, or a part
    (tmp_path / "ckpt-00000000.json").write_text("{}")
    (tmp_path / "ckpt-00000001-shard-0.npz.tmp").write_bytes(b"cut short")
    for epoch in (1, 2, 3, 4):
        write_set(tmp_path, epoch, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-00000003.json", "ckpt-00000004.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-00000003.json", "ckpt-00000003.pt", "ckpt-00000004.json", "ckpt-00000004.pt"]
    latest = load_latest(tmp_path)
    assert latest.learner_state == learner_bytes(4) and latest.env_steps == 40 and latest.epochs == 4


def test_a_checkpoint_without_its_counters_is_ignored(tmp_path):
    write_set(tmp_path, 1, keep=3)
    (tmp_path / "ckpt-00000002.pt").write_bytes(b"half")  # crashed before the .json was renamed
    assert load_latest(tmp_path).learner_state == learner_bytes(1)
    assert load_latest(tmp_path / "missing") is None


@pytest.mark.parametrize("damage", ["truncated .pt", "corrupt .json", "flipped byte in .pt"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tmp_path, damage):
    for epoch in (1, 2):
        write_set(tmp_path, epoch, keep=3)
    newest = tmp_path / "ckpt-00000002"
    if damage == "truncated .pt":
        newest.with_suffix(".pt").write_bytes(newest.with_suffix(".pt").read_bytes()[:100])
    elif damage == "corrupt .json":
        newest.with_suffix(".json").write_text('{"epochs": 2, "env_')
    else:
        data = bytearray(newest.with_suffix(".pt").read_bytes())
        data[7] ^= 1
        newest.with_suffix(".pt").write_bytes(bytes(data))
    skipped: list[str] = []
    point = load_latest(tmp_path, skipped.append)
    assert point.epochs == 1 and point.learner_state == learner_bytes(1)
    assert len(skipped) == 1 and "ckpt-00000002 is damaged" in skipped[0] and "\n" not in skipped[0]


def shard_state(i: int, rows: int = 8) -> dict:
    return {"storage": {"columns": {"obs": np.full((rows, 3), i, np.float32), "action": np.arange(rows)},
                        "size": rows, "cursor": 0, "total_added": 10 * i},
            "sampled": i, "priorities": {"masses": np.ones(rows, np.float32), "max_mass": 1.5}}


def test_a_checkpoint_set_holds_every_shards_replay_and_a_damaged_part_voids_it(tmp_path):
    replay = [shard_state(1), shard_state(2)]
    for epoch in (1, 2, 3, 4):
        write_set(tmp_path, epoch, keep=2, replay=replay)
    # the sets rotated out took their replay files with them
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == [
        "ckpt-00000003-shard-0.npz", "ckpt-00000003-shard-1.npz",
        "ckpt-00000004-shard-0.npz", "ckpt-00000004-shard-1.npz"]
    point = load_latest(tmp_path)
    assert point.epochs == 4
    assert [content_digest(read_replay(p)) for p in point.replay_files] == [content_digest(r) for r in replay]
    (tmp_path / "ckpt-00000004-shard-1.npz").unlink()  # a part missing: the whole set is void
    skipped: list[str] = []
    assert load_latest(tmp_path, skipped.append).epochs == 3
    assert skipped and "ckpt-00000004 is damaged" in skipped[0]


def test_a_checkpoint_that_cannot_be_written_leaves_nothing_of_itself(tmp_path):
    """A set whose write fails part-way (here at this process's file-size limit, as at a full disk)
    takes its written parts and temporary files with it, names the newest whole set in one line,
    and that set still loads."""
    write_set(tmp_path, 1, keep=3, replay=[shard_state(0)])
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, limit[1]))
    try:  # the learner's part first, then the driver's: each leaves nothing behind
        write_replay(replay_file(tmp_path, 2, 0), shard_state(1))
        with pytest.raises(OutputNotWritten) as refused:
            write_replay(replay_file(tmp_path, 2, 1), shard_state(2, rows=20_000))  # too big
        assert str(refused.value) == f"{replay_file(tmp_path, 2, 1)} was not written (File too large)"
        discard_parts(tmp_path, 2)  # what the driver does when a shard's file failed
        with pytest.raises(OutputNotWritten) as failed:
            save_checkpoint(tmp_path, 2, learner_bytes(2, size=40_000), {"epochs": 2, "env_steps": 2, "wall_s": 1.0},
                            keep=3)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    assert str(failed.value) == (f"checkpoint ckpt-00000002 could not be written in {tmp_path} (File too large); "
                                 "the newest whole one is ckpt-00000001")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-00000001-shard-0.npz", "ckpt-00000001.json", "ckpt-00000001.pt"]
    assert load_latest(tmp_path).epochs == 1


class ShardHolder:
    """The learner's side of a checkpoint set (LearnerActor.state_bytes and write_replay), its
    shards holding `rows` transitions each."""

    def __init__(self, rows: int):
        self.rows = rows

    def state_bytes(self) -> bytes:
        return learner_bytes(5)

    def write_replay(self, shard: int, location: str) -> dict:
        return {**write_replay(location, shard_state(shard, rows=self.rows)), "pause_s": 0.0}


@pytest.mark.parametrize("ending", ["written", "learner lost"])
def test_a_final_set_of_an_epoch_that_has_one_replaces_it_only_once_whole(tmp_path, ending):
    """A run stopped just after its epoch's set was written: the final set of that epoch counts the
    env steps collected since. Its replay goes to files of its own, so the set it replaces stays whole
    until the new manifest is there; one never completed (its learner lost) leaves that set as it was."""
    outputs = RunOutputs(tmp_path, keep_checkpoints=3, runtime=LocalRuntime())
    holder = ShardHolder(rows=8)
    outputs.request_checkpoint(holder, 5, {"epochs": 5, "env_steps": 2418, "wall_s": 1.0}, shards=2)
    outputs.write_pending_checkpoint()
    holder.rows = 12  # the collectors went on after the epoch's set
    outputs.request_checkpoint(holder, 5, {"epochs": 5, "env_steps": 2673, "wall_s": 2.0}, shards=2)
    assert load_latest(tmp_path / "checkpoints").env_steps == 2418  # its parts written, not its manifest
    if ending == "written":
        outputs.write_pending_checkpoint()
        env_steps, rows, files = 2673, 12, ["ckpt-00000005-shard-0-at-2673.npz", "ckpt-00000005-shard-1-at-2673.npz"]
    else:
        outputs.drop_pending_checkpoint()
        env_steps, rows, files = 2418, 8, ["ckpt-00000005-shard-0.npz", "ckpt-00000005-shard-1.npz"]
    point = load_latest(tmp_path / "checkpoints")
    assert point.env_steps == env_steps and [read_replay(f)["storage"]["size"] for f in point.replay_files] == [rows] * 2
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [*files, "ckpt-00000005.json",
                                                                           "ckpt-00000005.pt"]


def test_a_local_run_writes_each_set_when_it_is_due_and_its_final_set_counts_every_env_step(tmp_path):
    """In one process a set's answers have all come by the time the loop looks: each due set is
    written then, not left pending to the run's end."""
    run = tmp_path / "run"
    assert main(["train", "--local", "--run-dir", str(run), "stop.env_steps=3000", "stop.eval_return=null",
                 "checkpoint.every_epochs=2", "checkpoint.keep=1000", "replay.min_size=500", "eval.video_every=0"]) == 0
    epochs = [json.loads(p.read_text())["epochs"] for p in list_checkpoints(run / "checkpoints")]
    periodic = [epoch for epoch in epochs if epoch % 2 == 0]
    assert len(periodic) >= 3 and periodic == list(range(2, 2 * len(periodic) + 1, 2)), epochs
    newest = json.loads(list_checkpoints(run / "checkpoints")[-1].read_text())
    assert newest["env_steps"] == json.loads((run / "summary.json").read_text())["env_steps"]


def test_sigterm_is_told_apart_when_ray_hands_back_a_plain_keyboard_interrupt():
    """Ray re-raises a signal that lands while the driver waits in ray.get/ray.wait as a plain
    KeyboardInterrupt; the exit code must still say SIGTERM (143), not Ctrl-C (130)."""
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        install_stop_signals()
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()  # not reached: the handler raises first
        assert exit_code(KeyboardInterrupt()) == 143 and signal_name(KeyboardInterrupt()) == "SIGTERM"
        install_stop_signals()  # a new run forgets the last one's signals
        assert exit_code(KeyboardInterrupt()) == 130
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def test_a_signal_while_a_run_is_made_is_raised_when_it_begins_and_a_second_only_where_the_end_allows():
    """`hold` (the run directory made, the run not begun): the first signal is noted and raised at
    `release`; after it, a second signal raises only inside `second_aborts` (the run's end)."""
    from raypex.cluster.driver.signals import hold, release, second_aborts

    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        install_stop_signals()
        hold()
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before kill returns: noted, not raised
        with pytest.raises(Terminated):
            release()
        os.kill(os.getpid(), signal.SIGINT)  # a second one outside the end: noted only
        with pytest.raises(KeyboardInterrupt), second_aborts():
            os.kill(os.getpid(), signal.SIGINT)
            signal.pause()  # not reached: the handler raises first
        assert exit_code(KeyboardInterrupt()) == 143  # the first signal decides
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def test_tensorboard_log_is_readable_by_tensorboard(tmp_path):
    log = TensorBoardLog(tmp_path)
    log.text("config", "seed: 0\nenv:\n  id: CartPole-v1")
    for step in range(3):
        log.scalars({"charts/SPS": 100.0 * step, "losses/td_loss": 0.5}, step=step * 10)
    log.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("charts/SPS")] == [(0, 0.0), (10, 100.0), (20, 200.0)]
    text = acc.Tensors("config")[0].tensor_proto.string_val[0].decode()
    assert "id: CartPole-v1" in text


def collector(env_steps=0, version=0, returns=(), epsilon=0.4) -> CollectorStats:
    return CollectorStats(index=0, env_steps=env_steps, first_step_at=None, chunks_pushed=0, transitions_pushed=0,
                          episode_returns=list(returns), episode_lengths=[int(r) for r in returns], epsilon=epsilon,
                          exploration="epsilon", version=version, version_loaded_at=None, max_weight_load_s=0.0,
                          phase_s={}, act_precision="fp32", act_form="numpy")


def shard(inserted=0, size=None, sampled=0, nbytes=1, capacity=10, writer_env_steps=None) -> ShardStats:
    return ShardStats(0, inserted if size is None else size, inserted, sampled, capacity, nbytes,
                      inserted if writer_env_steps is None else writer_env_steps, 1, 0)


def test_metrics_rates_lag_and_episode_means():
    metrics = RunMetrics()
    collectors = [collector(100, version=2, returns=[10.0, 20.0]), collector(300, version=-1, epsilon=0.0)]
    shards = [shard(50, sampled=200, nbytes=4_800, capacity=100), shard(150, sampled=600, nbytes=14_400, capacity=300)]
    first = metrics.poll(collectors, shards, now=0.0)
    assert first["charts/episodic_return"] == 15.0 and first["replay/replay_ratio"] == 4.0
    assert first["replay/bytes_per_transition"] == 48.0
    assert first["perf/policy_lag_max"] == 0.0  # version -1 (no weights yet) is not counted
    epoch = metrics.epoch(EpochStats(updates_in_epoch=10, epoch_s=0.5, updates=10, epochs=1, version=5,
                                     samples_per_update=64, broadcast_ms=1.0, wait_fraction=0.1,
                                     losses={"td_loss": 1.0, "q_values": 2.0, "actor_loss": 3.0}))
    assert {key: epoch[key] for key in epoch if key.startswith("losses/")} == {
        "losses/td_loss": 1.0, "losses/q_values": 2.0, "losses/actor_loss": 3.0}
    assert epoch["learner/samples_per_s"] == 1280 and "replay/beta" not in epoch
    collectors = [collector(600, version=3), collector(800, version=5, epsilon=0.0)]
    shards[0] = dataclasses.replace(shards[0], inserted=250, sampled=1200)
    second = metrics.poll(collectors, shards, now=2.0)
    assert second["charts/SPS"] == pytest.approx((1400 - 400) / 2.0)
    assert second["replay/insert_rate"] == pytest.approx(100.0) and second["replay/sample_rate"] == pytest.approx(500.0)
    assert second["perf/policy_lag_mean"] == 1.0 and second["perf/policy_lag_max"] == 2.0
    assert metrics.samples_per_s == pytest.approx(640 / 0.5) and metrics.wait_fraction == pytest.approx(0.1)


def test_a_collector_that_has_not_reported_its_shards_steps_is_counted_from_its_shard():
    """A restarted collector counts on from its shard's stored steps only once it has read them,
    and one dead for good reports nothing: env steps come from what each shard holds then, so
    they still equal the inserts."""
    metrics = RunMetrics()
    shards = [shard(1_000), shard(800)]
    metrics.poll([collector(16), collector(800)], shards, now=0.0)  # 0 restarted
    assert metrics.env_steps == 1_800
    shards[1] = shard(900)
    metrics.poll([], shards, now=1.0)  # the run's end, collector 0 dead for good: the shards alone
    assert metrics.env_steps == 1_900 == sum(metrics.shard_inserted)


def test_env_steps_per_s_spans_the_rate_window_not_one_poll():
    """Collectors held by the ratio limiter report in bursts: a run making 100 env steps/s must
    not show 0 between two bursts."""
    metrics = RunMetrics()
    shards = [shard(0, capacity=1, nbytes=0)]
    for t in range(25):  # a burst of 200 steps every 2 s, polled every 0.5 s
        scalars = metrics.poll([collector(200 * (t // 4))], shards, now=t * 0.5)
    assert scalars["charts/SPS"] == pytest.approx((200 * 6 - 200 * 1) / (12.0 - 2.0))  # the window's oldest: 2.0 s
    assert metrics.poll([collector(200 * 6)], shards, now=12.5)["charts/SPS"] > 0  # no burst since the last poll


def test_placement_check_names_what_is_missing():
    nodes = [{"CPU": 2.0}]
    request = ResourceRequest(num_collectors=4, collector_cpus=1.0, learner_cpus=1.0, learner_gpus=0)
    with pytest.raises(PlacementError, match=r"needs 5 CPUs .* but the Ray cluster has 2"):
        check_fits(request, nodes)
    gpu = ResourceRequest(num_collectors=1, collector_cpus=0.1, learner_cpus=1.0, learner_gpus=1)
    with pytest.raises(PlacementError, match="asks for 1 GPU but the Ray cluster has 0"):
        check_fits(gpu, nodes)
    wide = ResourceRequest(num_collectors=1, collector_cpus=3.0, learner_cpus=0.5, learner_gpus=0)
    with pytest.raises(PlacementError, match="needs 3 CPUs on a single node but the largest node has 2"):
        check_fits(wide, [{"CPU": 2.0}, {"CPU": 2.0}])
    check_fits(ResourceRequest(2, 0.4, 1.0, 0), nodes)  # the default config fits a 2-CPU laptop


def test_a_local_cluster_is_judged_by_its_cpus_before_it_starts():
    """Before Ray starts only the CPUs are known: a GPU request passes, too many CPUs do not."""
    check_cpus_fit_one_node(ResourceRequest(2, 0.4, 1.0, 1, 0.25), 2)
    with pytest.raises(PlacementError, match=r"^the run needs 13.8 CPUs \(learner 1 \+ 32 x collector 0.4\) but the "
                                             r"Ray cluster has 2; lower collectors.num or collectors.num_cpus$"):
        check_cpus_fit_one_node(ResourceRequest(32, 0.4, 1.0, 1), 2)


def test_progress_logs_lines_when_not_a_terminal():
    stream = io.StringIO()
    progress = ProgressLine(stream, log_every_s=0.0)
    progress.update(1.5, 12_345, 6_000.0, 21.5, None, 0.25, 0.5)
    progress.message("solved")
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[   1.5s] env steps   12.3k |   6.0k steps/s | return    21.5 | eval      -")
    assert lines[1] == "solved"
    json.dumps(lines)


def test_progress_shows_the_share_done_the_time_left_and_replay_filling():
    stream = io.StringIO()
    progress = ProgressLine(stream, log_every_s=0.0)
    progress.update(3.0, 11_800, 4_000.0, None, None, None, None, goal_steps=500_000, filling=(11_800, 50_000))
    progress.update(60.0, 250_000, 5_000.0, 30.0, 100.0, 0.5, 1.0, goal_steps=500_000)
    # after Ctrl-C the speed falls towards nothing: no "hours left" estimate from it
    progress.update(62.0, 251_000, 10.0, 30.0, 100.0, 0.5, 1.0, goal_steps=500_000, stopping=True)
    # with stop.eval_return set an evaluation may end the run sooner: the time left is a bound
    progress.update(64.0, 260_000, 5_000.0, 30.0, 100.0, 0.5, 1.0, goal_steps=500_000, may_solve=True)
    # stop.wall_s: its share and time left where it comes first (90 of 120 s: 30 s, against 48 s of steps)
    progress.update(64.0, 260_000, 5_000.0, 30.0, 100.0, 0.5, 1.0, goal_steps=500_000, time_limit=(90.0, 120.0))
    progress.update(64.0, 260_000, 5_000.0, 30.0, 100.0, 0.5, 1.0, goal_steps=500_000, time_limit=(10.0, 120.0))
    first, second, third, fourth, fifth, sixth = stream.getvalue().splitlines()
    assert "env steps   11.8k (  2%, 2m02s left)" in first and "filling replay 11.8k/50.0k" in first
    assert "env steps  250.0k ( 50%, 50s left)" in second and "loss 0.5000" in second
    assert "env steps  251.0k (stopping) |" in third and "left" not in third
    assert "env steps  260.0k ( 52%, at most 48s left) |" in fourth
    assert "env steps  260.0k ( 75%, 30s left) |" in fifth
    assert "env steps  260.0k ( 52%, 48s left) |" in sixth


def test_progress_says_starting_until_the_speed_is_measured_and_metrics_measure_it_at_the_second_poll():
    stream = io.StringIO()
    progress, metrics = ProgressLine(stream, log_every_s=0.0), RunMetrics()
    metrics.poll([collector(1_200)], [shard(1_200)], now=0.0)
    progress.update(8.4, metrics.env_steps, metrics.sps, None, None, None, None, goal_steps=500_000)
    metrics.poll([collector(1_700)], [shard(1_700)], now=0.5)
    progress.update(8.9, metrics.env_steps, metrics.sps, None, None, None, None, goal_steps=500_000)
    first, second = stream.getvalue().splitlines()
    assert "env steps    1.2k (  0%) |     starting |" in first and "0 steps/s" not in first and "?" not in first
    assert "env steps    1.7k (  0%, 8m18s left) |   1.0k steps/s |" in second  # (500k - 1.7k) / 1k per s


def test_a_log_gets_the_first_line_with_a_loss_at_once_then_one_line_per_interval():
    """Not a terminal: between the interval's lines, the first line that shows a loss (learning
    has begun) is written at once; later losses wait for the interval."""
    stream = io.StringIO()
    progress = ProgressLine(stream, log_every_s=3600.0)
    progress.update(1.0, 1_000, 1_000.0, None, None, None, None, filling=(1_000, 5_000))  # the first line
    progress.update(2.0, 2_000, 1_000.0, None, None, None, None, filling=(2_000, 5_000))  # filling: waits
    progress.update(3.0, 6_000, 1_000.0, 10.0, None, None, 0.0)  # filled, no loss yet: waits
    progress.update(4.0, 7_000, 1_000.0, 10.0, None, 0.75, 0.0)  # the first loss: written
    progress.update(5.0, 8_000, 1_000.0, 10.0, None, 0.5, 0.0)  # waits for the interval
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "filling replay 1.0k/5.0k" in lines[0] and "loss 0.7500" in lines[1], lines


CPU = {"CPU": 1.0}
PLACEMENT_TABLE = [
    # (shape, nodes, request: collectors, collector CPUs, learner CPUs, learner GPUs; learner node, pair strategy)
    ("1x2", [{"CPU": 2.0}], (2, 0.4, 1.0, 0), 0, "PACK"),
    ("3x1, 3 collectors", [CPU] * 3, (3, 0.4, 1.0, 0), 0, "SPREAD"),  # the learner fills a node
    ("3x1, 2 collectors", [CPU] * 3, (2, 0.4, 1.0, 0), 0, "STRICT_SPREAD"),
    ("2x1+1x4", [CPU, CPU, {"CPU": 4.0}], (3, 0.4, 1.0, 0), 2, "STRICT_SPREAD"),
    ("GPU node + CPU nodes", [{"CPU": 4.0}, {"CPU": 8.0, "GPU": 1.0}, {"CPU": 4.0}], (9, 1.0, 4.0, 1), 1, "SPREAD"),
    ("GPU node + CPU nodes, few collectors", [{"CPU": 4.0}, {"CPU": 8.0, "GPU": 1.0}, {"CPU": 4.0}], (3, 1.0, 4.0, 1),
     1, "STRICT_SPREAD"),
    # collectors acting on the GPU (collectors.act_device): half a GPU for the learner, 0.5/11 each for 11 collectors
    ("one GPU box, GPU acting", [{"CPU": 16.0, "GPU": 1.0}], (11, 1.0, 4.0, 0.5, 0.0454), 0, "PACK"),
    ("two GPU boxes, GPU acting", [{"CPU": 8.0, "GPU": 1.0}, {"CPU": 8.0, "GPU": 1.0}], (8, 1.0, 2.0, 0.5, 0.0625), 0,
     "SPREAD"),
]


@pytest.mark.parametrize("shape,nodes,asked,learner_node,strategy", PLACEMENT_TABLE, ids=[r[0] for r in PLACEMENT_TABLE])
def test_placement_finds_the_layout_each_node_shape_allows(shape, nodes, asked, learner_node, strategy):
    request = ResourceRequest(*asked)
    check_fits(request, nodes)
    assert best_learner_node(request, nodes) == learner_node
    assert pair_strategy(request, room_beside_learner(request, nodes, learner_node)) == strategy


def test_placement_refuses_shapes_with_no_layout_in_one_line():
    too_small = ResourceRequest(1, 0.4, 1.0, 0)
    with pytest.raises(PlacementError, match=r"needs 1.4 CPUs .* but the Ray cluster has 1"):
        check_fits(too_small, [CPU])
    # Enough CPUs in all (2.8 of 3), but a 0.6-CPU collector fits beside a 1-CPU learner on no node.
    fragmented = ResourceRequest(3, 0.6, 1.0, 0)
    with pytest.raises(PlacementError, match="^3 collectors of 0.6 CPUs do not fit beside the learner "
                       "on nodes of 3 x 1 CPU: at most 2 do; lower collectors.num"):
        check_fits(fragmented, [CPU] * 3)
    # A CPU learner would fit on the 2-CPU node, leaving the 3 CPUs to the pairs; a GPU learner
    # must take the GPU node, and then only one 1.5-CPU pair has room.
    nodes = [{"CPU": 3.0, "GPU": 1.0}, {"CPU": 2.0}]
    check_fits(ResourceRequest(2, 1.5, 2.0, 0), nodes)
    with pytest.raises(PlacementError, match="on nodes of 1 x 3 CPU \\+ 1 GPU, 1 x 2 CPU: at most 1 do"):
        check_fits(ResourceRequest(2, 1.5, 2.0, 1), nodes)
    # Collectors acting on a GPU go only where a GPU share is left: CPUs on a CPU-only node do not hold them.
    gpu_acting = ResourceRequest(4, 1.0, 1.0, 0.5, 0.1)
    with pytest.raises(PlacementError, match="^4 collectors of 1 CPUs \\+ 0.1 GPU do not fit beside the learner "
                       "on nodes of 1 x 3 CPU \\+ 1 GPU, 1 x 2 CPU: at most 2 do"):
        check_fits(gpu_acting, nodes)
    with pytest.raises(PlacementError, match=r"needs 1.7 GPUs \(learner 0.5 \+ 4 x collector 0.3\) but the Ray "
                       "cluster has 1; lower collectors.num_gpus"):
        check_fits(ResourceRequest(4, 0.5, 1.0, 0.5, 0.3), nodes)


def test_the_solve_clock_starts_when_the_command_process_started():
    """time_to_solve_s counts from the process start; it must be neither late (start-up not
    counted) nor early (a second of boot-time rounding counted as start-up)."""
    import subprocess
    import sys
    import time

    before = time.time()
    printed = subprocess.run(
        [sys.executable, "-c", "from raypex.cluster.process_clock import process_start_time; print(repr(process_start_time()))"],
        capture_output=True, text=True, check=True,
    ).stdout
    after = time.time()
    started = float(printed)
    tick = 0.011  # /proc counts in 10 ms clock ticks
    assert before - tick <= started <= after


def test_sigint_stops_raypex_even_when_started_with_it_ignored():
    """A script's `raypex train ... &` starts with SIGINT ignored; `kill -INT` must still reach the
    clean-stop path (KeyboardInterrupt), as Ctrl-C does in a terminal."""
    import subprocess
    import sys

    code = ("import os, signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "from raypex.cluster.commands.cli import main; main(['eval', '/nonexistent-run-dir'])\n"
            "try:\n    os.kill(os.getpid(), signal.SIGINT); signal.pause()\n"
            "except KeyboardInterrupt:\n    print('stopped')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip().splitlines()[-1] == "stopped"


def test_the_reaper_finds_and_kills_descendants_that_lost_the_variable():
    """A process carrying the cluster's variable starts a child with an empty environment (as
    Ray's agents look once their title overwrote theirs): both are the cluster's, and both die."""
    marker = f"RAYPEX_REAPER_TEST={uuid.uuid4().hex}"
    key, value = marker.split("=")
    # the parent outlives its child (it then waits on its stdin): killed in either order, it dies by SIGKILL
    spawn_child = ("import subprocess, sys; child = subprocess.Popen(['sleep', '60'], env={}); "
                   "print(child.pid, flush=True); child.wait(); sys.stdin.read()")
    parent = subprocess.Popen([sys.executable, "-c", spawn_child], env={**os.environ, key: value},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        found = cluster_processes(marker)
        assert set(found) == {parent.pid, child}
        assert reap(found) == 2
        parent.wait(timeout=10)
        assert parent.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while still_running(found) and time.monotonic() < deadline:
            time.sleep(0.05)  # a deadline for the kernel to deliver the child's SIGKILL
        assert still_running(found) == []
    finally:
        parent.kill()


def _evaluated(outcome: RunOutcome, *means: float) -> None:
    for version, mean in enumerate(means):
        outcome.record_evaluation({"mean": mean, "version": version}, f"ref{version}", 100 * version,
                                  Taken(time.time(), 100 * version))


def test_the_export_is_the_solving_version_else_the_best_evaluated_else_the_kept_policy():
    solved = RunOutcome(target=200.0, clock_start=time.time())
    _evaluated(solved, 50.0, 210.0)
    assert solved.to_export() == ("ref1", 1, 210.0) and solved.ended == "solved"

    # trained on past its peak: the peak is exported, not the collapse
    collapsed = RunOutcome(target=None, clock_start=time.time())
    _evaluated(collapsed, 120.0, 500.0, 40.1)
    assert collapsed.to_export() == ("ref1", 1, 500.0) and collapsed.final_eval == 40.1

    # a resumed run whose found policy.pt2 scored better (or as well) keeps it
    resumed = RunOutcome(target=None, clock_start=time.time(), kept_policy=PolicyFile(500.0, 7))
    _evaluated(resumed, 480.0, 500.0)
    assert resumed.to_export() is None and resumed.fields()["policy_eval_return"] == 500.0
    better = RunOutcome(target=None, clock_start=time.time(), kept_policy=PolicyFile(300.0, 7))
    _evaluated(better, 280.0, 310.0)
    assert better.to_export() == ("ref1", 1, 310.0)

    # a learner that died takes its weights with it: nothing of it is exported
    collapsed.forget_weights()
    assert collapsed.to_export() is None


def test_a_node_with_other_software_is_named_with_what_differs():
    from raypex.cluster.ray_runtime.versions import differences, software_versions

    driver = software_versions()
    assert set(driver) == {"raypex", "ray", "torch", "python"} and "+" not in driver["torch"]
    assert differences(driver, {"10.0.0.5": dict(driver), "10.0.0.6": dict(driver)}) == []
    other = {**driver, "torch": "2.12.0", "raypex": "0.0.9"}
    assert differences(driver, {"10.0.0.5": dict(driver), "10.0.0.7": other}) == [
        f"node 10.0.0.7 has raypex 0.0.9 (the driver has {driver['raypex']})",
        f"node 10.0.0.7 has torch 2.12.0 (the driver has {driver['torch']})"]


def test_the_hparams_entry_reads_real_config_keys_and_results_left_out_when_missing():
    from raypex.cluster.driver.tensorboard_layout import HPARAM_KEYS, hparam_values, hparams_summaries, result_scalars

    config = load_config(None, ["learner.lr=0.002"])
    values = hparam_values(config)
    assert set(values) == set(HPARAM_KEYS) and values["learner.lr"] == 0.002 and values["env.id"] == "CartPole-v1"
    assert [s.value[0].tag for s in hparams_summaries(config, "run-a")] == ["_hparams_/experiment",
                                                                             "_hparams_/session_start_info"]
    assert result_scalars(480.0, None) == {"hparams/final_eval_return": 480.0}


def test_the_custom_layout_is_a_custom_scalars_summary_tensorboard_can_read():
    from tensorboard.plugins.custom_scalar import layout_pb2

    from raypex.cluster.driver.tensorboard_layout import LAYOUT, custom_layout

    value = custom_layout().value[0]
    assert value.tag == "custom_scalars__config__" and value.metadata.plugin_data.plugin_name == "custom_scalars"
    layout = layout_pb2.Layout.FromString(value.tensor.string_val[0])
    assert [c.title for c in layout.category] == list(LAYOUT)


def test_the_startup_timeline_keeps_each_moments_earliest_report_in_phase_order():
    timeline = StartupTimeline(clock_start=100.0)
    timeline.mark("ray_connected", 101.5)
    timeline.mark("env_checked", 100.25)
    first, second = collector(), collector()
    first.startup = {"process_started": 102.0, "imported": 102.4, "env_ready": 102.7, "constructed": 103.0}
    second.startup, second.first_step_at = {"process_started": 101.8, "constructed": 103.5}, 103.75
    timeline.collectors([first, second])
    timeline.mark("first_env_step", 104.0)  # a later collector's first step: the first one counts
    timeline.learner({"process_started": 101.9, "constructed": 103.2, "warmed_up": 103.6})
    assert timeline.seconds() == {"env_checked": 0.25, "ray_connected": 1.5, "collector_process_started": 1.8,
                                  "learner_process_started": 1.9, "collector_imported": 2.4, "collector_env_ready": 2.7,
                                  "collector_constructed": 3.0,
                                  "learner_constructed": 3.2, "first_env_step": 3.75, "learner_warmed_up": 3.6}
    assert list(timeline.seconds()) == [p for p in PHASES if p in timeline.seconds()]
    with pytest.raises(ValueError, match="unknown start-up phase 'first_step'"):
        timeline.mark("first_step", 1.0)


GPU_BOX = [{"CPU": 16.0, "GPU": 1.0}]
MIXED = [{"CPU": 8.0, "GPU": 1.0}, {"CPU": 16.0}]


@pytest.mark.parametrize("overrides,nodes,learner_device,image_obs,expected,said", [
    (["collectors.num=11"], GPU_BOX, "cuda", True, "cuda",
     "auto: cuda (an image network and a GPU on every node; each collector reserves 0.0454 GPU)"),
    ([], MIXED, "cuda", True, "cpu", "auto: cpu (1 of the cluster's 2 nodes have no GPU; collectors.act_device=cuda"),
    ([], GPU_BOX, "cuda", False, "cpu", None),  # an MLP acts in numpy on its core
    ([], GPU_BOX, "cpu", True, "cpu", None),  # the learner stays on the CPU (cuda_graphs off)
    (["collectors.act_device=cpu"], GPU_BOX, "cuda", True, "cpu", None),
    (["collectors.act_device=cuda"], MIXED, "cuda", True, "cuda", None),  # asked for: only GPU nodes get collectors
], ids=["one GPU box", "a node without GPU", "MLP", "CPU learner", "cpu asked", "cuda asked"])
def test_collectors_act_on_the_gpu_for_image_networks_when_every_node_has_one(overrides, nodes, learner_device,
                                                                               image_obs, expected, said):
    from raypex.cluster.ray_runtime.devices import choose_act_device

    stream = io.StringIO()
    config = load_config(None, overrides)
    assert choose_act_device(config, nodes, learner_device, image_obs, ProgressLine(stream)) == expected
    assert (said in stream.getvalue()) if said else stream.getvalue() == ""


def test_gpu_acting_collectors_share_half_the_learners_gpu_and_the_user_config_keeps_auto():
    from raypex.cluster.ray_runtime.devices import choose_act_device, gpu_requests, with_act_device

    config = load_config(None, ["collectors.num=11"])
    assert gpu_requests(config, "cuda", "cpu") == (1.0, 0.0, 0.0)
    assert gpu_requests(config, "cuda", "cuda") == (0.5, 0.0454, 0.0)  # 11 x 0.0454 = 0.4994 of the other half
    assert gpu_requests(load_config(None, ["collectors.num_gpus=0.1"]), "cuda", "cuda") == (0.5, 0.1, 0.0)
    resolved = with_act_device(config, "cuda")
    assert (resolved.collectors.act_device, resolved.collectors.num_gpus) == ("cuda", 0.0454)
    assert (config.collectors.act_device, config.collectors.num_gpus) == ("auto", "auto")
    check_fits(ResourceRequest(11, 1.0, 4.0, *gpu_requests(config, "cuda", "cuda")[:2]), GPU_BOX)
    with pytest.raises(PlacementError, match="^collectors.act_device is cuda but the Ray cluster has no GPU; use auto"):
        choose_act_device(load_config(None, ["collectors.act_device=cuda"]), [{"CPU": 2.0}], "cpu", True,
                          ProgressLine(io.StringIO()))


def test_served_acting_on_a_gpu_asks_for_one_share_per_node_and_none_per_collector():
    """With collectors.acting served the node's acting server runs the forward: on a GPU box it
    takes the acting half of the GPU, its collectors ask for none; a collector on a node without a
    GPU would have no server there, so cuda asked for is refused naming it."""
    from raypex.cluster.ray_runtime.devices import choose_act_device, gpu_requests, with_act_device

    config = load_config(None, ["collectors.num=11", "collectors.acting=served"])
    stream = io.StringIO()
    assert choose_act_device(config, GPU_BOX, "cuda", True, ProgressLine(stream)) == "cuda"
    assert "auto: cuda (an image network and a GPU on every node; each node's acting server reserves 0.5 GPU)" \
        in stream.getvalue()
    resolved = with_act_device(config, "cuda")
    assert gpu_requests(resolved, "cuda", "cuda") == (0.5, 0.0, 0.5)
    assert gpu_requests(with_act_device(config, "cpu"), "cuda", "cpu") == (1.0, 0.0, 0.0)
    sac = load_config(Path(__file__).parents[1] / "configs/pendulum.yaml", ["collectors.acting=served", "collectors.act_device=cuda"])
    assert sac.collectors.act_device == "cuda"  # any plug-in's module runs on a GPU server
    check_fits(ResourceRequest(11, 1.0, 4.0, 0.5, 0.0, server_gpus=0.5), GPU_BOX)
    with pytest.raises(PlacementError, match=r"^the learner's 0.5 GPU and the acting server of its node's collectors "
                                             r"\(0.8 GPU\) do not fit on one node's 1 GPU"):
        check_fits(ResourceRequest(11, 1.0, 4.0, 0.5, 0.0, server_gpus=0.8), GPU_BOX)
    with pytest.raises(PlacementError, match="^collectors.acting served with act_device cuda puts an acting server on "
                                             "the GPU of each collector's node, and 1 of the cluster's 2 nodes"):
        choose_act_device(load_config(None, ["collectors.acting=served", "collectors.act_device=cuda"]), MIXED,
                          "cuda", True, ProgressLine(io.StringIO()))


def test_a_collector_told_to_act_on_a_gpu_it_cannot_see_says_so():
    from raypex.actors.settings import CollectorSettings
    from raypex.learner.algorithms.registry import algorithm

    settings = CollectorSettings(
        index=0, num_collectors=1, env_id="MinAtar/Breakout-v1", env_kwargs={}, num_envs=2, obs_shape=(4, 10, 10),
        obs_dtype="uint8", num_actions=3, hidden=[8], dueling=True, n_step=1, gamma=0.99, chunk_steps=1,
        epsilon_base=0.4, epsilon_alpha=7.0, epsilon_anneal_steps=0, seed=0, act_device="cuda")
    with pytest.raises(RuntimeError, match="^collectors.act_device cuda: this collector's process sees no GPU"):
        algorithm("dqn").policy(settings, np.zeros((2, 4, 10, 10), np.uint8), 0, np.random.default_rng(0))


def test_a_collectors_host_makes_auto_fp32_where_the_cpu_has_no_bf16_units(monkeypatch):
    """Emulated bf16 is never faster; the collector would time it for 1.4-1.75 s (BENCHMARKS.md (git history))."""
    from raypex.actors.settings import CollectorSettings
    from raypex.cluster.hosts import acting_precision

    settings = CollectorSettings(
        index=0, num_collectors=1, env_id="MinAtar/Breakout-v1", env_kwargs={}, num_envs=2, obs_shape=(4, 10, 10),
        obs_dtype="uint8", num_actions=3, hidden=[8], dueling=True, n_step=1, gamma=0.99, chunk_steps=1,
        epsilon_base=0.4, epsilon_alpha=7.0, epsilon_anneal_steps=0, seed=0)
    monkeypatch.setattr(acting_precision, "cpu_has_bf16_units", lambda: False)
    assert acting_precision.act_precision_for_this_cpu(settings).act_precision == "fp32"
    for asked in ("bf16", "fp32"):  # asked for: kept
        assert acting_precision.act_precision_for_this_cpu(
            dataclasses.replace(settings, act_precision=asked)).act_precision == asked
    on_gpu = dataclasses.replace(settings, act_device="cuda")
    assert acting_precision.act_precision_for_this_cpu(on_gpu).act_precision == "auto"  # the GPU's to decide
    monkeypatch.setattr(acting_precision, "cpu_has_bf16_units", lambda: True)
    assert acting_precision.act_precision_for_this_cpu(settings).act_precision == "auto"  # timed by the collector


class AnsweringEvaluator:
    """An evaluator part that answers at once, naming the weights it was given."""

    def evaluate(self, weights, give_up=None, record=False) -> dict:
        return {"mean": 0.0, "min": 0.0, "version": weights, "complete": True}


class RecordingEvaluator:
    """An evaluator part that answers at once, with a video when asked for one, and keeps whether
    each call asked."""

    def __init__(self):
        self.asked: list[bool] = []

    def evaluate(self, weights, give_up=None, record=False) -> dict:
        self.asked.append(record)
        video = {"video": b"APNG"} if record else {}
        return {"mean": 0.0, "min": 0.0, "version": weights, "complete": True, **video}


def scheduler_of(evaluator, started: int = 0) -> EvaluationScheduler:
    """An evaluation scheduler recording every third evaluation, with `started` (0 or 1) evaluations started."""
    scheduler = EvaluationScheduler(LocalRuntime(), evaluator, every_env_steps=1000, every_s=None,
                                    give_up=None, newest_weights=lambda: 1, video_every=3)
    if started:
        scheduler.on_env_steps(0)
        scheduler.on_epoch()
        scheduler.on_env_steps(1000)
        scheduler.maybe_start()
    return scheduler


def test_the_final_evaluation_records_a_video_when_no_evaluation_did():
    """A run too short for any evaluation during it (its evaluator came up late on a busy box), or
    whose recording evaluation had not come back when it ended, still gets its video, from the final
    one; after a recorded one came back the final one records only on its turn."""
    short = RecordingEvaluator()
    scheduler_of(short).evaluate_now(1)
    assert short.asked == [True]
    longer = RecordingEvaluator()
    scheduler = scheduler_of(longer, started=1)
    scheduler.take()
    scheduler.evaluate_now(1)
    assert longer.asked == [True, False]  # the first evaluation recorded; the final one is the second
    unfinished = RecordingEvaluator()
    scheduler_of(unfinished, started=1).evaluate_now(1)  # the recording one still running: its video never comes
    assert unfinished.asked == [True, True]


def test_evaluations_are_due_by_env_steps_or_by_time_and_never_twice_on_the_same_weights():
    clock, newest = [100.0], [0]
    scheduler = EvaluationScheduler(LocalRuntime(), AnsweringEvaluator(), every_env_steps=1000,
                                    every_s=None, give_up=None, newest_weights=lambda: newest[0],
                                    clock=lambda: clock[0])

    def poll(env_steps: int, publish: bool = True):
        """An epoch (publishing weights) or not, then the count; what evaluation it started and ended."""
        if publish:
            newest[0] += 1
            scheduler.on_epoch()
        scheduler.on_env_steps(env_steps)
        scheduler.maybe_start()
        return scheduler.take()[1:] if scheduler.pending is not None else None

    scheduler.on_env_steps(0)
    assert poll(999) is None
    assert poll(1000) == (2, Taken(100.0, 1000))
    assert poll(1500) is None
    assert poll(2600) == (4, Taken(100.0, 2600))  # the 2,000 mark passed: due at once
    assert poll(3100, publish=False) is None  # due, but no weights since the last evaluation
    assert poll(3150) == (5, Taken(100.0, 3150))  # the due one starts on the next weights
    clock[0] += 10_000
    assert poll(3200) is None  # no time trigger without every_s

    timed = EvaluationScheduler(LocalRuntime(), AnsweringEvaluator(), every_env_steps=1000,
                                every_s=30.0, give_up=None, newest_weights=lambda: "w", clock=lambda: clock[0])
    timed.on_env_steps(12_345)  # a resumed run: its first mark is 13,000
    timed.on_epoch()
    clock[0] += 29.0
    timed.on_env_steps(12_400)
    timed.maybe_start()
    assert timed.pending is None
    clock[0] += 1.0
    timed.on_env_steps(12_450)  # 30 s since the last became due
    timed.maybe_start()
    assert timed.take()[2] == Taken(clock[0], 12_450)
    timed.on_epoch()
    timed.on_env_steps(13_000)
    timed.maybe_start()
    assert timed.take()[2].env_steps == 13_000


def test_every_slot_stands_in_for_a_poll_no_collector_answered_with_collectors_num_auto():
    """The run's end may hear no collector (one being restarted): with collectors.num auto each slot
    stands in with its last collector's counters, or none's, the absent ones acting with no weights."""
    from types import SimpleNamespace

    from raypex.cluster.driver.run import TrainingRun
    from raypex.replay.contracts import CollectorStats

    reported = dataclasses.replace(CollectorStats.idle(0), env_steps=500, version=3)
    run = SimpleNamespace(supervisor=SimpleNamespace(absent={1, 2}), last_collector_stats={0: reported, 1: reported},
                          actors=SimpleNamespace(collectors=[object(), None, None]))
    every = TrainingRun._every_collector(run, [0], [])
    assert [(s.env_steps, s.version) for s in every] == [(500, 3), (500, -1), (0, -1)]
    fixed = SimpleNamespace(supervisor=SimpleNamespace(absent=set()), last_collector_stats={},
                            actors=SimpleNamespace(collectors=[object()]))
    assert TrainingRun._every_collector(fixed, [0], []) == []  # a fixed run's shards alone count then
