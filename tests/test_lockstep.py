"""The lockstep replica: the run's parts without Ray, held to the same limiter as a real run."""

from pathlib import Path

from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import load_config
from raypex.cluster.local.lockstep import main, run_lockstep

ROOT = Path(__file__).resolve().parent.parent


def test_collectors_stay_within_the_limiter_slack_and_the_learner_trains():
    config = load_config(ROOT / "configs" / "cartpole.yaml", ["learner.updates_per_epoch=10", "eval.episodes=4"])
    spec = inspect_env(config.env.id, config.env.kwargs)
    row = run_lockstep(config, spec, max_updates=200)
    assert row["updates"] == 200 and not row["solved"]
    r = config.replay
    ahead = row["inserted"] - row["sampled"] / r.samples_per_insert
    chunk = config.collectors.chunk_steps * config.env.num_envs  # one push may overshoot the bound
    assert 0 < ahead <= r.min_size + r.error_buffer + chunk * config.collectors.num
    assert row["sampled"] == 200 * config.learner.micro_batch * config.learner.accumulation_steps


def test_bad_config_is_one_line_and_exit_2(capsys):
    assert main([str(ROOT / "configs" / "cartpole.yaml"), "learner.lr=-1", "--seeds", "1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
