"""The pixel path end to end on a real local Ray cluster: the test pixel game, then real ALE Pong.

PixelCatch (tests/pixel_env.py) is registered by the tests; Ray's worker processes find it through
PYTHONPATH, which the local cluster started by `raypex train` inherits from this process.
"""

import json
import os
import re
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cluster.commands.cli import main
from replay.frames import frame_bytes_per_slot

TESTS = Path(__file__).parent
ROOT = TESTS.parent
PIXEL_CATCH = ["env.id=pixel_env:PixelCatch-v0", "env.num_envs=4", "env.clip_rewards=true", "network.hidden=[64]",
               "learner.micro_batch=32", "learner.accumulation_steps=2", "learner.lr=1e-3", "replay.capacity=20000",
               "replay.min_size=1000", "replay.samples_per_insert=4", "eval.episodes=8", "eval.every_epochs=4"]


def scalars(run_dir: Path) -> dict[str, list]:
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def with_tests_on_pythonpath(monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))


def test_pixel_game_learns_through_frame_once_replay(tmp_path, monkeypatch, capsys):
    """Frames stored once, stacks rebuilt in the shards, uint8 to the CNN: and it learns the game."""
    with_tests_on_pythonpath(monkeypatch)
    run = tmp_path / "catch"
    # 9 of 9 points over 8 greedy episodes; a random policy scores about -6.
    assert main(["train", "--run-dir", str(run), *PIXEL_CATCH, "stop.env_steps=150000", "stop.eval_return=8.0"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["time_to_solve_s"] is not None, summary
    assert summary["replay_bytes_per_transition"] == frame_bytes_per_slot((36, 36))
    tags = scalars(run)
    assert set(tags["replay/bytes_per_transition"]) == {frame_bytes_per_slot((36, 36))}
    # Episode returns are the raw score (+-3 per ball) although training clipped rewards to +-1.
    assert max(abs(v) for v in tags["charts/episodic_return"]) > 3
    capsys.readouterr()
    # Over fresh episodes the saved policy (the version whose 8-episode evaluation reached 8.0)
    # scored 4.5 once in 8 episodes; 16 episodes and 4.0, ten points above a random policy, say
    # "it learned the game" without failing on a borderline policy's sampling noise.
    assert main(["eval", str(run), "--episodes", "16"]) == 0
    mean = float(re.match(r"mean return (-?\d+\.\d+)", capsys.readouterr().out).group(1))
    assert mean >= 4.0


def test_pong_smoke_run_trains_on_real_ale_frames(tmp_path, capsys, monkeypatch):
    """A few thousand steps of real Pong through the shipped pong config, named from a directory
    without configs/ (`raypex train pong`), scaled down for 2 cores: prioritized replay as the
    config has it, priorities from the collectors' stacks, over frame-once shards."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "pong"
    code = main(["train", "pong", "--run-dir", str(run), "collectors.num=2",
                 "env.num_envs=2", "stop.env_steps=8000", "replay.capacity=4000", "replay.min_size=2000",
                 "learner.micro_batch=32", "learner.accumulation_steps=2", "learner.updates_per_epoch=10",
                 "eval.episodes=1", "eval.every_epochs=1000", "checkpoint.every_epochs=1000"])
    assert code == 0
    summary = json.loads((run / "summary.json").read_text())
    assert 8000 <= summary["env_steps"] < 11000  # stopped near stop.env_steps
    assert summary["epochs"] > 0 and summary["learner_samples_per_s"] > 0
    bytes_per = summary["replay_bytes_per_transition"]
    assert bytes_per == frame_bytes_per_slot((84, 84)) and bytes_per <= 1.1 * 7056
    tags = scalars(run)
    returns = tags["charts/episodic_return"]
    # 2,000 steps per env: every env finishes a game (a random policy loses 0-21 in about 800).
    assert returns and all(-21 <= r <= 21 for r in returns) and min(returns) < -1  # raw Pong scores
    assert -21 <= summary["final_eval_return"] <= 21
    assert (run / "policy.pt2").is_file() and list((run / "checkpoints").glob("ckpt-*.pt"))
    assert np.isfinite(tags["losses/td_loss"]).all()
    assert summary["priority_updates_applied"] > 0 and min(tags["replay/priority_mean"]) > 0
    assert 0 < min(tags["replay/is_weight_min"]) <= 1


def test_bench_collect_stage_reports_collectors_against_the_env_alone(tmp_path, monkeypatch):
    """`raypex bench --stage collect` on a pixel env: env_raw, env_policy, collect through Ray and
    collect against the env alone, then broadcast; nothing of the learner; each collector's dtype."""
    with_tests_on_pythonpath(monkeypatch)
    out = tmp_path / "collect.json"
    assert main(["bench", "--stage", "collect", "--quick", "--json", str(out), *PIXEL_CATCH]) == 0
    data = json.loads(out.read_text())
    rows = {r["name"]: r for r in data["rows"]}
    assert set(rows) == {"env_raw", "env_policy", "collect", "collect_vs_env_raw", "broadcast",
                         "broadcast_env_loop_pause"}
    raw = rows["env_raw"]["value"]
    assert rows["collect_vs_env_raw"]["reference"] == raw * min(2, os.cpu_count())
    assert rows["env_policy"]["reference"] == raw and rows["collect"]["value"] > 0
    precisions = data["machine"]["details"]["act_precision"]
    assert len(precisions) == 2 and set(precisions) <= {"fp32", "bf16"}
