"""The local wiring builds the planned topology in one process and connects it as the Ray wiring
does (no Ray): chunks to the collector's own shard of the replay, draws from every shard, weights
to every collector once per version."""

import numpy as np
import pytest

from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import load_config
from raypex.cluster.local.seams import WeightBoard
from raypex.cluster.local.wiring import build_local
from raypex.cluster.plan.topology import plan_run
from raypex.replay.contracts import Weights

OVERRIDES = ["collectors.num=3", "env.num_envs=4", "collectors.chunk_steps=4", "replay.min_size=64",
             "learner.micro_batch=32", "learner.updates_per_epoch=3", "replay.samples_per_insert=2"]


def local_run():
    config = load_config(None, OVERRIDES)
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    return plan_run(config, spec), build_local(plan_run(config, spec))


def test_the_plan_names_one_shard_per_collector_in_the_learners_replay():
    plan, run = local_run()
    assert [c.index for c in plan.collectors] == [0, 1, 2] and plan.learners[0].replay.num_shards == 3
    assert len(run.replay.shards) == 3
    assert plan.learners[0].settings.micro_batch == 32 and plan.learners[0].replay.limiter.samples_per_insert == 2


def test_each_collector_writes_to_its_own_shard():
    _, run = local_run()
    run.collectors[1].collect_chunk()
    inserted = [shard.inserted for shard in run.replay.shards]
    assert inserted[0] == inserted[2] == 0 and inserted[1] > 0


def test_the_learner_samples_every_shard_and_its_weights_reach_every_collector():
    _, run = local_run()
    for _ in range(6):
        for collector in run.collectors:
            collector.collect_chunk()
    metrics = run.learner.train_epoch()
    assert metrics.updates_in_epoch == 3 and np.isfinite(metrics.losses["td_loss"])
    assert run.replay.sampled == 3 * 32 and all(shard.sampled > 0 for shard in run.replay.shards)
    assert run.weights.latest_weights.version == 1
    for collector in run.collectors:
        collector.collect_chunk()
        assert collector.version == 1  # loaded between env steps


def test_a_learner_held_back_for_data_has_the_collectors_insert_up_to_the_limiter_bound_and_no_further():
    """With no other thread to insert, a learner the replay ratio holds back lets the collectors
    collect (the local runtime's lockstep): the learner trains every update it was asked for, and
    the inserts stay within the limiter's slack of what it sampled."""
    plan, run = local_run()
    for _ in range(20):
        assert run.learner.train_epoch().updates_in_epoch == 3
    limiter = plan.learners[0].replay.limiter
    ahead = run.replay.inserted - run.replay.sampled / limiter.samples_per_insert
    chunk = 4 * 4  # collectors.chunk_steps x env.num_envs: one push may overshoot the bound
    assert limiter.min_size - limiter.error_buffer <= ahead <= limiter.min_size + limiter.error_buffer \
        + chunk * len(run.collectors)
    assert run.replay.sampled == 20 * 3 * 32


def test_a_collector_held_by_the_limiter_takes_new_weights_without_stepping():
    _, run = local_run()
    for _ in range(6):
        for collector in run.collectors:
            collector.collect_chunk()
    run.learner.train_epoch()
    held = run.collectors[0]
    steps, q_before = held.env_steps, held.policy.forward.q_values(held.stepper.obs)
    held.load_newer_weights()  # what its sink calls while it waits for room
    assert held.version == 1 and held.env_steps == steps
    assert not np.allclose(held.policy.forward.q_values(held.stepper.obs), q_before)


def test_a_starved_learner_lets_the_collectors_run():
    _, run = local_run()  # nothing collected: the first batch needs min_size transitions
    run.learner.train_epoch()
    assert run.replay.inserted >= 64


def test_the_weight_board_hands_each_reader_each_version_once():
    board = WeightBoard()
    first, second = board.reader(), board.reader()
    assert first() is None
    board.publish(Weights(1, {}))
    assert first().version == 1 and first() is None and second().version == 1
    board.publish(Weights(2, {}))
    assert first().version == 2


def test_prioritized_replay_flows_collector_to_shard_to_learner_and_back():
    config = load_config(None, [*OVERRIDES, "replay.prioritized=true", "collectors.act_precision=fp32"])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    run = build_local(plan_run(config, spec))
    collector = run.collectors[0]
    pushed = []
    push = collector.push
    collector.push = lambda chunk: (pushed.append(chunk), push(chunk))
    run.learner.publish_weights()  # the collector acts with the learner's network from its first step
    for _ in range(3):
        collector.collect_chunk()
    network = collector.policy.forward  # CartPole's MLP, its acting graph
    assert collector.version >= 0 and network.graph.loaded
    for chunk in pushed:  # the collector's |n-step TD error|, one transition at a time
        for i in range(len(chunk["action"])):
            q = network.q_values(chunk["obs"][i : i + 1])[0, chunk["action"][i]]
            bootstrap = network.q_values(chunk["next_obs"][i : i + 1]).max()
            target = chunk["return"][i] + chunk["discount"][i] * bootstrap
            assert np.isclose(chunk["priority"][i], abs(float(target - q)), rtol=1e-5, atol=1e-6)
    stored = run.replay.shards[0].priorities
    assert stored.total == pytest.approx(stored.mass(np.concatenate([c["priority"] for c in pushed])).sum())
    for _ in range(3):
        run.learner.train_epoch()
    run.learner.feedback.flush()  # applied a few updates at a time; the run's end applies the rest
    applied = sum(shard.priorities.updates_applied for shard in run.replay.shards)
    assert applied == 3 * 3 * 32  # every transition trained on got its new priority (nothing was overwritten)
    assert all(shard.priorities.total > 0 for shard in run.replay.shards)


def test_a_local_run_stopped_by_env_steps_is_the_same_however_often_the_driver_looks(tmp_path, monkeypatch):
    """`--local` runs in lockstep, so the same seed gives the same run bit for bit. Its end once came
    at the driver's next poll, every half second of wall time: four identical commands stopped by
    stop.env_steps=15000 ended at 15,033 to 18,088. The collectors now stop at the budget themselves
    and the loop polls after each epoch: a driver polling all the time and one polling every 30 s
    end at the same env step, with the same checkpoint."""
    import json

    from raypex.cluster.commands.cli import main
    from raypex.cluster.driver import run as run_loop

    ends = []
    for poll_every_s in (0.0, 30.0):
        monkeypatch.setattr(run_loop, "POLL_EVERY_S", poll_every_s)
        run_dir = tmp_path / f"every-{poll_every_s:g}s"
        assert main(["train", "--local", "--run-dir", str(run_dir), "stop.env_steps=3000", "stop.eval_return=null",
                     "eval.video_every=0"]) == 0
        summary = json.loads((run_dir / "summary.json").read_text())
        manifest = json.loads(max((run_dir / "checkpoints").glob("ckpt-*.json")).read_text())
        ends.append((summary["env_steps"], summary["epochs"], manifest["learner_sha256"]))
    assert ends[0] == ends[1], ends
    assert 3000 <= ends[0][0] < 3000 + 16 * 16  # one chunk of one collector at most past the budget


def test_a_run_stopped_by_wall_time_ends_past_it_and_resumes_only_with_a_larger_one(tmp_path, capsys):
    """stop.wall_s counts the run's own seconds, the commands before a resume included: a run ends
    `wall_s` once past it (a local run looks after each epoch), a plain resume of it is refused in
    one line, and one with a larger stop.wall_s trains on to that."""
    import json

    from raypex.cluster.commands.cli import main

    run_dir = tmp_path / "run"
    # (300,000 env steps take this box over a minute: were stop.wall_s ignored, the test fails, not hangs)
    assert main(["train", "--local", "--run-dir", str(run_dir), "stop.env_steps=300000", "stop.eval_return=null",
                 "stop.wall_s=3", "eval.video_every=0"]) == 0
    first = json.loads((run_dir / "summary.json").read_text())
    assert first["ended"] == "wall_s" and first["wall_s"] >= 3, first
    capsys.readouterr()
    assert main(["train", "--resume", str(run_dir)]) == 2
    longer = f"{first['wall_s'] + 3:.0f}"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"raypex: error: --resume {run_dir}: the run is finished ({first['wall_s']:.0f} s of training, stop.wall_s=3); "
        f"to train on, give a larger one, e.g. stop.wall_s={longer} for as long again, or stop.wall_s=null")
    assert main(["train", "--resume", str(run_dir), f"stop.wall_s={longer}"]) == 0
    second = json.loads((run_dir / "summary.json").read_text())
    assert second["ended"] == "wall_s" and second["wall_s"] >= float(longer) and second["env_steps"] > first["env_steps"]


def test_a_local_runs_hang_watch_leaves_the_users_signals_alone():
    """The watcher interrupts a hung step with a real-time signal no one handles, never with
    SIGUSR1 or SIGUSR2 (a user's, a tool's: faulthandler, Tune), and gives it back at the end."""
    import signal

    from raypex.cluster.local.hang_watch import HangWatch

    users = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)}
    watch = HangWatch([], timeout_s=60.0, env_id="CartPole-v1")
    watch.start()
    try:
        assert {s: signal.getsignal(s) for s in users} == users
        assert signal.SIGRTMIN <= watch.signum <= signal.SIGRTMAX
        assert signal.getsignal(watch.signum) == watch._raise
    finally:
        watch.stop()
    assert signal.getsignal(watch.signum) == signal.SIG_DFL


def test_served_acting_in_a_local_run_is_one_server_for_every_collector():
    """`--local` with collectors.acting served: the collectors share one acting server in the
    process, which acts with the learner's published weights (each collector's request one forward)."""
    config = load_config(None, [*OVERRIDES, "collectors.acting=served"])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    run = build_local(plan_run(config, spec))
    run.learner.publish_weights()
    for _ in range(2):
        for collector in run.collectors:
            collector.collect_chunk()
    server = run.acting_server
    assert all(c.policy.form == "onnx, served" for c in run.collectors)
    assert server.version == run.learner.version and server.requests == server.forwards >= 3 * 2 * 4
