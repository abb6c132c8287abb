"""Dict and Tuple observations end to end on a real Ray cluster (the suite's kept-up local one): the
test env (tests/parts_env.py: an image part and a vector part, rewarded only when both are read)
learns with DQN and with SAC, its replay stores the image once per transition, its policy.pt2 and
ONNX model take the same parts; settings it cannot take are one line each.

The env is found through PYTHONPATH: tests/ is on the kept-up cluster's workers' path
(tests/kept_up_cluster.py) and on the driver's here, as a user's env module must be on a cluster's nodes.
"""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from raypex.cluster.commands.cli import main
from raypex.replay.frames import frame_bytes_per_slot
from tests.kept_up_cluster import raypex_joined

TESTS = Path(__file__).parent
PARTS = (("image", (1, 8, 8), "uint8"), ("turn", (4,), "float32"))
# one image (64 B) and one vector (16 B) per transition, with the action, return, discount and bookkeeping
DQN_BYTES = frame_bytes_per_slot((), 0, PARTS)
SAC_BYTES = frame_bytes_per_slot((), 1, PARTS)


@pytest.fixture
def on_pythonpath(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_dqn_learns_a_dict_env_that_needs_both_parts_and_stores_the_image_once(on_pythonpath, capsys,
                                                                                joining_environment):
    run = on_pythonpath / "dqn"
    # A policy reading one part scores about 2.5 of 10; 9.5 needs both.
    done = raypex_joined(["train", "cartpole", "--run-dir", str(run), "env.id=parts_env:QuadrantTurn",
                          "stop.env_steps=100000", "stop.eval_return=9.5", "eval.video_every=0"], joining_environment)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ended"] == "solved", summary
    assert summary["replay_bytes_per_transition"] == DQN_BYTES < 2 * 64 + 2 * 16
    assert main(["eval", str(run), "--episodes", "20"]) == 0
    assert float(re.match(r"mean return (-?\d+\.\d+)", capsys.readouterr().out).group(1)) >= 9.0
    assert main(["export", str(run), "--onnx", str(on_pythonpath / "policy.onnx")]) == 0
    said = capsys.readouterr().out
    assert "obs.image, obs.turn -> q_values (obs.image [batch, 1, 8, 8], obs.turn [batch, 4] float32)" in said

    import onnxruntime

    from raypex.learner.policy_file import load_policy

    rng = np.random.default_rng(0)
    image = np.zeros((6, 1, 8, 8), np.float32)
    image[np.arange(6), 0, rng.integers(0, 8, 6), rng.integers(0, 8, 6)] = 255.0
    obs = {"image": image, "turn": np.eye(4, dtype=np.float32)[rng.integers(0, 4, 6)]}
    session = onnxruntime.InferenceSession(str(on_pythonpath / "policy.onnx"))
    onnx_q = session.run(None, {"obs.image": obs["image"], "obs.turn": obs["turn"]})[0]
    np.testing.assert_allclose(onnx_q, load_policy(run / "policy.pt2").q_values(obs).numpy(), rtol=1e-4, atol=1e-4)


def test_sac_learns_a_dict_env_with_box_actions(on_pythonpath, joining_environment):
    run = on_pythonpath / "sac"
    # -1.0 over ten steps: within about 0.3 of the target at each; reading one part scores about -13
    done = raypex_joined(["train", "pendulum", "--run-dir", str(run), "algo.name=sac", "env.id=parts_env:QuadrantTurn",
                          "env.kwargs={continuous: true}", "stop.env_steps=30000", "stop.eval_return=-1.0",
                          "eval.video_every=0"], joining_environment)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ended"] == "solved", summary
    assert summary["replay_bytes_per_transition"] == SAC_BYTES


def test_r2d2_runs_on_a_dict_env_and_its_policy_takes_the_parts_and_its_state(on_pythonpath, capsys):
    """Sequences of parts through collectors, replay and learner (`--local`); what R2D2 makes of
    this env in a longer run (it solves it, 9 of 10, in 58k env steps with replay.samples_per_insert
    32) is too long for the suite."""
    from raypex.learner.policy_file import load_policy

    run = on_pythonpath / "r2d2"
    code = main(["train", "popgym", "--local", "--run-dir", str(run), "env.id=parts_env:QuadrantTurn",
                 "eval.max_return=10", "stop.eval_return=null", "stop.env_steps=4000", "replay.min_size=500"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ended"] == "env_steps" and summary["learner_samples"] > 0, summary
    policy = load_policy(run / "policy.pt2")
    obs = {"image": np.zeros((3, 1, 8, 8), np.float32), "turn": np.eye(4, dtype=np.float32)[:3]}
    actions, state = policy.act(obs, policy.initial_state(3))
    assert actions.shape == (3,) and tuple(state.shape) == (3, policy.state_size)


@pytest.mark.parametrize(("overrides", "said"), [
    (["collectors.acting=served"], "collectors.acting served: env.id 'parts_env:QuadrantTurn' has observations in parts"),
    (["collectors.act_precision=bf16"], "collectors.act_precision bf16: env.id 'parts_env:QuadrantTurn' has"),
    (["algo.name=td3", "env.kwargs={continuous: true}", "network.obs_norm=true"],
     "network.obs_norm is for one observation array; env.id 'parts_env:QuadrantTurn' has observations in parts "
     "(image, turn)"),
])
def test_settings_observations_in_parts_cannot_take_are_one_line(on_pythonpath, capsys, overrides, said):
    run = on_pythonpath / "refused"
    assert main(["train", "cartpole", "--run-dir", str(run), "env.id=parts_env:QuadrantTurn", *overrides]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert not run.exists()
