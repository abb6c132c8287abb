"""The pixel paths end to end on a real Ray cluster (the suite's kept-up local one), on the test
pixel games: frame stacks for DQN, images with channels for TD3 (real ALE Pong runs through the
README's lines, tests/test_readme_lines.py).

PixelCatch and PixelReach (tests/pixel_env.py) are found through PYTHONPATH: the run's driver gets
tests/ on it from this test, and the kept-up cluster's workers from the cluster's own environment
(tests/kept_up_cluster.py), as a user's env module on PYTHONPATH must be on a cluster's nodes.
"""

import json
import os
import re
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from raypex.cluster.commands.cli import main
from raypex.replay.frames import frame_bytes_per_slot
from tests.kept_up_cluster import raypex_joined

TESTS = Path(__file__).parent
ROOT = TESTS.parent
PIXEL_CATCH = ["env.id=pixel_env:PixelCatch-v0", "env.num_envs=4", "env.clip_rewards=true", "network.hidden=[64]",
               "learner.micro_batch=32", "learner.accumulation_steps=2", "learner.lr=1e-3", "replay.capacity=20000",
               "replay.min_size=1000", "replay.samples_per_insert=4", "eval.episodes=8"]


def scalars(run_dir: Path) -> dict[str, list]:
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def with_tests_on_pythonpath(monkeypatch, tmp_path: Path) -> None:
    """tests/ on the driver's PYTHONPATH, and the run started outside the repository: from the
    repository's root the driver would find pixel_env under its working directory and ship that
    directory to every actor (1.5 s more per run here), which the env's import does not need."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.chdir(tmp_path)


def test_pixel_game_learns_through_frame_once_replay(tmp_path, monkeypatch, capsys, joining_environment):
    """Frames stored once, stacks rebuilt in the shards, uint8 to the CNN: and it learns the game."""
    with_tests_on_pythonpath(monkeypatch, tmp_path)
    run = tmp_path / "catch"
    # 7 of 9 points over 8 greedy episodes (one ball missed in eight games); a random policy
    # scores about -6. Asking 8.0 (near perfect) took 61-66 s here against 40-46 s for 7.0, and
    # the policies 7.0 saved scored 7.5 over 16 fresh episodes and 7.86 over 100.
    done = raypex_joined(["train", "--run-dir", str(run), *PIXEL_CATCH, "eval.every_env_steps=800",
                          "stop.env_steps=150000", "stop.eval_return=7.0"], joining_environment)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "as its working directory" not in done.stderr  # imported from PYTHONPATH, not shipped
    summary = json.loads((run / "summary.json").read_text())
    assert summary["time_to_solve_s"] is not None, summary
    assert summary["replay_bytes_per_transition"] == frame_bytes_per_slot((36, 36))
    tags = scalars(run)
    assert set(tags["replay/bytes_per_transition"]) == {frame_bytes_per_slot((36, 36))}
    # Episode returns are the raw score (+-3 per ball) although training clipped rewards to +-1.
    assert max(abs(v) for v in tags["charts/episodic_return"]) > 3
    capsys.readouterr()
    # Over fresh episodes the saved policy scores less than the 8-episode evaluation that first
    # passed 7.0: four scored 6.36-7.08 over 100 (one episode's standard deviation about 3.5), and
    # one in CI scored 3.38 over 16, under that bar of 4.0. 32 episodes and 3.0, nine points above a
    # random policy, say "it learned the game" without failing on a borderline policy's luck.
    assert main(["eval", str(run), "--episodes", "32"]) == 0
    mean = float(re.match(r"mean return (-?\d+\.\d+)", capsys.readouterr().out).group(1))
    assert mean >= 3.0


def test_td3_learns_to_reach_from_pictures_on_a_ray_cluster(tmp_path, monkeypatch, capsys, joining_environment):
    """Continuous actions from images with channels: collectors act with the image actor in torch,
    replay stores the uint8 pictures, the learner trains both encoders, the evaluator scores the
    published actor, and policy.pt2 acts on a picture in the env's units."""
    with_tests_on_pythonpath(monkeypatch, tmp_path)
    run = tmp_path / "reach"
    # A random or motionless policy scores about -5.2, one walking straight to the target -0.3.
    # Episodes are 16 steps, so evaluations are cheap and long ones keep luck out of the check: the
    # run stops on 50 episodes and the saved policy is scored on 50 fresh ones. The first policy to
    # pass is a borderline one: stopping at -2.0 over 20 episodes, two of six saved policies scored
    # -2.68 and -2.67 over 100 fresh ones (a single episode can score -14.7); stopping at -1.5 over
    # 20, five scored -0.95 to -1.67, but one in CI scored -3.28 over 50.
    done = raypex_joined(["train", str(ROOT / "configs/pendulum.yaml"), "--run-dir", str(run), "env.id=pixel_env:PixelReach-v0",
                          "algo.name=td3", "network.hidden=[64]", "learner.micro_batch=64",
                          "replay.samples_per_insert=16", "replay.min_size=500", "eval.episodes=50",
                          "eval.every_env_steps=400", "stop.env_steps=40000", "stop.eval_return=-1.5"], joining_environment)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["time_to_solve_s"] is not None, summary
    assert any(run.glob("videos/eval-v*.png"))
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "50"]) == 0
    mean = float(re.match(r"mean return (-?\d+\.\d+)", capsys.readouterr().out).group(1))
    assert mean >= -3.0
    from raypex.learner.policy_file import load_policy

    picture = np.zeros((2, 12, 12), np.uint8)  # the agent in column 2, the target in column 9
    picture[0, :, 2], picture[1, :, 9] = 255, 255
    action = load_policy(run / "policy.pt2").act(picture)
    assert action.shape == (1,) and 0.0 < float(action[0]) <= 2.0  # towards the target, inside the bounds
