"""A recurrent collector's data as the learner reads it: the numpy step collectors and the
evaluator act with is the learner's torch step, and every replayed sequence carries the state its
collector had at its first step, so an unroll from it continues where the collector was."""

import dataclasses

import numpy as np
import pytest
import torch

from raypex.actors.collector import Collector
from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import load_config
from raypex.cluster.plan.settings import collector_settings, storage_spec
from raypex.learner.acting_graph import export_acting_graph
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.recurrent_networks import RecurrentQNetwork, StatefulQ
from raypex.learner.weights import export_arrays
from raypex.replay.contracts import Weights
from raypex.replay.shard import build_storage

SIZE = 8  # LSTM units


def network(seed: int = 0, core: str = "lstm") -> RecurrentQNetwork:
    torch.manual_seed(seed)
    return RecurrentQNetwork((4,), 2, [16], SIZE, core=core)


def test_each_stored_sequence_starts_from_the_state_its_collector_acted_from():
    config = load_config(None, ["algo.name=r2d2", "env.num_envs=3", "collectors.num=1", "collectors.chunk_steps=7",
                                f"network.recurrent_size={SIZE}", "network.hidden=[16]", "replay.sequence_length=6",
                                "replay.sequence_overlap=2", "algo.burn_in=2", "replay.capacity=3000",
                                "replay.min_size=300", "collectors.epsilon_base=0.5"])
    spec = inspect_env(config.env.id, config.env.kwargs)
    settings = dataclasses.replace(collector_settings(config, spec, 0), seed=3)
    storage = build_storage(storage_spec(config, spec))
    collector = Collector(settings, storage.add, lambda: weights)
    net = network()
    weights = Weights(1, export_arrays(net), acting_graph=export_acting_graph(algorithm("r2d2"), net, (4,), "float32"))
    for _ in range(40):  # 280 steps of 3 envs: CartPole episodes end and start again inside sequences
        collector.collect_chunk()
    assert collector.env_steps == storage.total_added > 0
    steps = {name: storage.backend.read(storage.columns[name], (slice(None),)).reshape(
        3, storage.steps_per_env, *storage.columns[name].shape[1:]) for name in ("obs", "reward", "discount", "first")}
    written = storage.written
    assert written <= storage.steps_per_env  # nothing overwritten: every step is in the ring in order
    # The state before each step, recomputed from the stored steps with the learner's network
    stateful = StatefulQ(net)
    state = np.zeros((3, 2 * SIZE), np.float32)
    before = np.zeros((written, 3, 2 * SIZE), np.float32)
    for t in range(written):
        state[steps["first"][:, t]] = 0.0
        before[t] = state
        with torch.no_grad():
            state = stateful(torch.from_numpy(steps["obs"][:, t]), torch.from_numpy(state))[1].numpy()
    rows = storage.sampleable_rows()
    assert len(rows) > 10
    stored = storage.gather(rows)
    starts = storage.start[rows]
    env = rows // storage.slots_per_env
    # kept in float16: equal to its precision (a state one step off differs by far more: tenths)
    np.testing.assert_allclose(stored["state"], before[starts, env], rtol=1e-3, atol=1e-3)
    # an episode's end: discount 0 on its last step, then the autoreset's pad step (reward 0, no env
    # step), then the next episode's first step
    ends = np.argwhere(steps["discount"][:, :written - 2] == 0)
    assert len(ends) > 0
    for e, t in ends:
        if steps["reward"][e, t] == 0:  # a pad step itself
            continue
        assert steps["reward"][e, t + 1] == 0 and steps["discount"][e, t + 1] == 0 and steps["first"][e, t + 2]


def test_a_recurrent_policy_file_takes_and_gives_its_state(tmp_path):
    from raypex.learner.policy_file import RECURRENT, export_policy_archive, load_policy

    net = network().eval()
    (tmp_path / "policy.pt2").write_bytes(export_policy_archive(StatefulQ(net), (4,), RECURRENT, 2 * SIZE))
    policy = load_policy(tmp_path / "policy.pt2")
    assert policy.recurrent and tuple(policy.initial_state(3).shape) == (3, 2 * SIZE)
    stateful = StatefulQ(net)

    def step(obs, state):
        with torch.no_grad():
            q, state = stateful(torch.from_numpy(obs), torch.from_numpy(state))
        return q.numpy(), state.numpy()

    rng = np.random.default_rng(1)
    state, expected_state = policy.initial_state(3), np.zeros((3, 2 * SIZE), np.float32)
    one_state = policy.initial_state()
    for _ in range(4):
        obs = rng.normal(size=(3, 4)).astype(np.float32)
        actions, state = policy.act(obs, state)
        q, expected_state = step(obs, expected_state)
        np.testing.assert_array_equal(actions, q.argmax(axis=1))
        np.testing.assert_allclose(state.numpy(), expected_state, rtol=1e-5, atol=1e-5)
        one_action, one_state = policy.act(obs[0], one_state)  # one observation, its own state
        assert int(one_action) == int(actions[0])
    with pytest.raises(ValueError, match="this policy.pt2 is recurrent: pass its state"):
        policy.act(obs)
    episodes = policy.episodes_actor(3)  # an evaluation's: the state carried between calls
    first, second = episodes(obs), episodes(obs)
    q1, s1 = step(obs, np.zeros((3, 2 * SIZE), np.float32))
    np.testing.assert_array_equal(first, q1.argmax(axis=1))
    np.testing.assert_array_equal(second, step(obs, s1)[0].argmax(axis=1))


def test_r2d2_on_pixels_stores_each_frame_once_and_its_policy_acts_on_them(tmp_path, monkeypatch, capsys):
    """A pixel game with one frame per step (the LSTM is the memory a frame stack would be): the
    CNN and LSTM train on sequences of frames, collectors and the evaluator act with its acting graph, and
    policy.pt2 takes a frame and the state. A frame stack is refused in one line: each frame
    would be stored once per stack it is in."""
    import json
    import os
    from pathlib import Path

    from raypex import load_policy
    from raypex.cluster.commands.cli import main

    tests = Path(__file__).parent
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tests))
    monkeypatch.chdir(tmp_path)
    small = ["algo.name=r2d2", "env.id=pixel_env:PixelCatch-v0", "env.num_envs=4", "collectors.num=1",
             "replay.sequence_length=10", "replay.sequence_overlap=5", "algo.burn_in=2", "network.recurrent_size=16",
             "network.hidden=[32]", "learner.micro_batch=8", "replay.samples_per_insert=2", "replay.capacity=4000",
             "replay.min_size=400", "stop.env_steps=1500", "stop.eval_return=null", "eval.episodes=2"]
    assert main(["train", "--local", *small]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "raypex: error: algo.name r2d2 stores every step's observation in its sequences, so a stack of 4 frames would "
        "store each frame 4 times; its LSTM is its memory: set env.frame_stack 1 for env.id 'pixel_env:PixelCatch-v0'")
    run = tmp_path / "run"
    assert main(["train", "--local", "--run-dir", str(run), *small, "env.frame_stack=1"]) == 0, capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == sum(summary["replay_inserted_per_shard"]) >= 1500 and summary["epochs"] > 0
    assert summary["replay_bytes_per_transition"] < 36 * 36 + 64  # a frame and its share of the rest, per step
    policy = load_policy(run)
    actions, state = policy.act(np.zeros((3, 1, 36, 36), np.uint8), policy.initial_state(3))
    assert actions.shape == (3,) and tuple(state.shape) == (3, 32)
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert capsys.readouterr().out.startswith("mean return")
