"""env.wrappers (actors/env_wrappers.py): Gymnasium wrappers from the config around every env of
the collectors and the evaluator, on the run's Ray actors. The config's one-line refusals are in
tests/test_config.py."""

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from raypex.actors.env_wrappers import wrapper_entry
from tests.kept_up_cluster import raypex_joined

WRAPPERS = "env.wrappers=[{gymnasium.wrappers:TimeLimit: {max_episode_steps: 50}}, {gymnasium.wrappers:ClipReward: {max_reward: 0.5}}]"


def test_two_wrappers_change_what_the_collectors_and_the_evaluator_see(tmp_path, joining_environment):
    """CartPole cut at 50 steps with each step's reward clipped to 0.5: every episode the collectors
    report returns half its length, and no evaluation returns more than 25, where the unwrapped
    env's do (CartPole pays 1 a step, up to 500)."""
    run = tmp_path / "wrapped"
    done = raypex_joined(["train", "--run-dir", str(run), WRAPPERS, "stop.eval_return=null", "stop.env_steps=15000",
                          "eval.every_env_steps=2000", "eval.episodes=8"], joining_environment)
    assert done.returncode == 0, done.stderr[-3000:]
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    lengths = {p.step: p.value for p in events.Scalars("charts/episodic_length")}
    returns = {p.step: p.value for p in events.Scalars("charts/episodic_return")}
    assert lengths and max(lengths.values()) <= 50
    assert all(returns[step] == pytest.approx(0.5 * length) for step, length in lengths.items())
    evaluations = [p.value for p in events.Scalars("eval/return_mean")]
    assert evaluations and max(evaluations) <= 25.0, evaluations
    result = json.loads((run / "summary.json").read_text())
    assert result["final_eval_return"] <= 25.0 and result["env_steps"] >= 15000, result


def test_an_entry_is_a_path_or_a_path_with_its_keyword_arguments():
    assert wrapper_entry("gymnasium.wrappers:ClipReward") == ("gymnasium.wrappers:ClipReward", {})
    assert wrapper_entry({"gymnasium.wrappers:ClipReward": {"max_reward": 1}}) == (
        "gymnasium.wrappers:ClipReward", {"max_reward": 1})
    assert wrapper_entry({"gymnasium.wrappers:ClipReward": None}) == ("gymnasium.wrappers:ClipReward", {})
    for bad in (3, {"a:B": 1, "c:D": 2}, {"a:B": [1]}, "a.B"):
        with pytest.raises(ValueError):
            wrapper_entry(bad)
