"""The pixel path end to end on a real local Ray cluster, on the test pixel game (real ALE Pong runs
through the README's lines, tests/test_readme_lines.py).

PixelCatch (tests/pixel_env.py) is registered by the tests; Ray's worker processes find it through
PYTHONPATH, which the local cluster started by `raypex train` inherits from this process.
"""

import json
import os
import re
from pathlib import Path

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
