"""`raypex export RUN --onnx PATH`: a real run's policy.pt2 as ONNX, run by ONNX Runtime, gives the
same greedy actions as policy.pt2 on 100 observations (DQN, R2D2 with its state in and out, SAC);
mistakes are one line and exit 2, nothing written."""

import re

import numpy as np
import onnxruntime
import pytest
import torch

from raypex.cluster.commands.cli import main
from raypex.learner.policy_file import load_policy

SHORT = ["stop.eval_return=null", "eval.video_every=0", "eval.episodes=2", "replay.min_size=300"]
RUNS = {
    "dqn": ["stop.env_steps=1500"],
    "r2d2": ["algo.name=r2d2", "stop.env_steps=1500", "replay.sequence_length=20", "replay.sequence_overlap=10",
             "algo.burn_in=5", "network.recurrent_size=16", "learner.micro_batch=16"],
    "sac": ["algo.name=sac", "env.id=Pendulum-v1", "stop.env_steps=1200", "learner.micro_batch=64"],
}


def trained(tmp_path, name: str, capsys) -> tuple:
    """A finished `--local` run of `name`'s config and its policy.pt2 loaded."""
    run = tmp_path / name
    assert main(["train", "--local", "--run-dir", str(run), *SHORT, *RUNS[name]]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return run, load_policy(run / "policy.pt2")


@pytest.mark.parametrize("name", sorted(RUNS))
def test_onnx_runtime_gives_the_actions_policy_pt2_gives(name, tmp_path, capsys):
    run, policy = trained(tmp_path, name, capsys)
    target = tmp_path / "policy.onnx"
    assert main(["export", str(run), "--onnx", str(target)]) == 0
    said = capsys.readouterr().out.strip()
    assert said.startswith(f"wrote {target}: obs") and said.endswith(f"from {run / 'policy.pt2'}"), said
    session = onnxruntime.InferenceSession(target.read_bytes(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    obs = rng.uniform(-2.0, 2.0, (100, *policy.obs_shape)).astype(np.float32)
    if name == "sac":
        actions = session.run(["actions"], {"obs": obs})[0]
        np.testing.assert_allclose(actions, policy.act(obs), rtol=1e-5, atol=1e-5)
        return
    if name == "r2d2":  # ten steps of ten envs, each carrying its state from the initial one
        state, onnx_state = policy.initial_state(10), np.zeros((10, policy.state_size), np.float32)
        for step in obs.reshape(10, 10, *policy.obs_shape):
            expected, state = policy.act(step, state)
            q, onnx_state = session.run(["q_values", "state_out"], {"obs": step, "state": onnx_state})
            assert np.array_equal(q.argmax(axis=1), expected)
            np.testing.assert_allclose(onnx_state, state.numpy(), rtol=1e-5, atol=1e-5)
        return
    q = session.run(["q_values"], {"obs": obs})[0]
    assert np.array_equal(q.argmax(axis=1), policy.act(obs))
    np.testing.assert_allclose(q, policy.q_values(obs).numpy(), rtol=1e-5, atol=1e-5)


def test_a_mistaken_export_is_one_line_and_writes_nothing(tmp_path, capsys):
    target = tmp_path / "policy.onnx"
    assert main(["export", str(tmp_path / "nothing"), "--onnx", str(target)]) == 2
    assert re.fullmatch(r"raypex: error: \S+nothing: no such run directory", capsys.readouterr().err.strip())
    assert main(["export", str(tmp_path), "--onnx", str(target)]) == 2
    assert "no policy.pt2" in capsys.readouterr().err
    (tmp_path / "policy.pt2").write_bytes(b"not an archive")
    assert main(["export", str(tmp_path / "policy.pt2"), "--onnx", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a readable policy.pt2" in err, err
    assert not target.exists()


def test_the_model_takes_any_batch(tmp_path, capsys):
    """One observation as a batch of one, and a batch of 37: the batch dimension is free."""
    run, policy = trained(tmp_path, "dqn", capsys)
    assert main(["export", str(run), "--onnx", str(tmp_path / "p.onnx")]) == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 37):
        obs = np.ones((batch, *policy.obs_shape), np.float32)
        q = session.run(None, {"obs": obs})[0]
        assert q.shape == (batch, 2)
        torch.testing.assert_close(torch.from_numpy(q), policy.q_values(obs), rtol=1e-5, atol=1e-5)
