"""A run's replay as a Minari dataset, and a dataset as prior data: `raypex export RUN --minari ID`
writes what `minari.load_dataset` opens, with the run's episodes and their returns as its
collectors counted them; a new run with replay.prior set to it draws half of each batch from it,
its counts kept apart from the shards'; mistakes are one line, exit 2."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from raypex.cluster.config.loading import config_to_yaml, load_config

# Small and quick: two envs of one collector, at least four whole 200-step episodes of Pendulum.
SMALL = ["collectors.num=1", "env.num_envs=2", "replay.samples_per_insert=8", "replay.min_size=256",
         "stop.eval_return=null", "eval.episodes=2", "eval.every_env_steps=500", "checkpoint.every_epochs=10"]


def raypex(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raypex", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


@pytest.fixture
def datasets(tmp_path, joining_environment) -> dict:
    """The environment of a user whose Minari datasets live in a directory of this test's."""
    return {**os.environ, **joining_environment, "MINARI_DATASETS_PATH": str(tmp_path / "datasets")}


def test_a_runs_replay_becomes_a_minari_dataset_and_a_new_runs_prior_data(tmp_path, datasets):
    import minari

    run = tmp_path / "collected"
    trained = raypex("train", "pendulum", *SMALL, "stop.env_steps=1000", "--run-dir", str(run), env=datasets)
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] >= 4, summary  # each env: at least 500 steps, two whole episodes

    exported = raypex("export", str(run), "--minari", "pendulum/collected-v0", env=datasets)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith("wrote Minari dataset pendulum/collected-v0 in ")
    os.environ["MINARI_DATASETS_PATH"] = datasets["MINARI_DATASETS_PATH"]
    try:
        dataset = minari.load_dataset("pendulum/collected-v0")
        returns = [float(np.sum(e.rewards)) for e in dataset.iterate_episodes()]
        assert dataset.total_episodes == summary["episodes"] and dataset.total_steps == 200 * summary["episodes"]
        assert np.mean(returns) == pytest.approx(summary["episode_return_mean"], rel=1e-5)
        assert dataset.spec.env_spec.id == "Pendulum-v1" and dataset.recover_environment().spec.max_episode_steps == 200
        first = next(dataset.iterate_episodes())
        assert (np.abs(first.actions) <= 2.0).all() and np.abs(first.actions).max() > 1.0  # the env's units
    finally:
        del os.environ["MINARI_DATASETS_PATH"]

    again = raypex("export", str(run), "--minari", "pendulum/collected-v0", env=datasets)
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        "raypex: error: --minari pendulum/collected-v0: a local Minari dataset pendulum/collected-v0 exists already; "
        "choose another id, or remove it with: minari delete pendulum/collected-v0"], again.stderr

    prior_run = tmp_path / "with-prior"
    with_prior = raypex("train", "pendulum", *SMALL, "stop.env_steps=600", "replay.prior=pendulum/collected-v0",
                        "--run-dir", str(prior_run), env=datasets)
    assert with_prior.returncode == 0, with_prior.stderr[-3000:]
    steps = 200 * summary["episodes"]
    assert f"replay.prior: {steps} transitions of pendulum/collected-v0, 50% of each batch" in with_prior.stderr
    counts = json.loads((prior_run / "summary.json").read_text())
    assert counts["replay_prior_transitions"] == steps
    assert counts["learner_prior_samples"] * 2 == counts["learner_samples"] > 0
    assert counts["env_steps"] == sum(counts["replay_inserted_per_shard"]) + counts["replay_lost_transitions"]
    assert sum(counts["replay_size_per_shard"]) == counts["env_steps"]  # the prior data is in no shard

    missing = raypex("train", "pendulum", "replay.prior=pendulum/elsewhere-v0", "--run-dir", str(tmp_path / "no"),
                     env=datasets)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        "raypex: error: replay.prior pendulum/elsewhere-v0: no local Minari dataset pendulum/elsewhere-v0 (in "
        f"{datasets['MINARI_DATASETS_PATH']}; raypex export RUN --minari ID writes one, MINARI_DATASETS_PATH says "
        "where)"], missing.stderr
    other_env = raypex("train", "cartpole", "replay.prior=pendulum/collected-v0", "--run-dir", str(tmp_path / "no"),
                       env=datasets)
    assert other_env.returncode == 2 and "its observations are Box(" in other_env.stderr
    assert "CartPole-v1's networks take shape (4,)" in other_env.stderr and not (tmp_path / "no").exists()


def test_export_of_a_replay_that_holds_n_step_returns_is_one_line(tmp_path, datasets):
    (tmp_path / "config.yaml").write_text(config_to_yaml(load_config(None, ["algo.n_step=3"])))
    refused = raypex("export", str(tmp_path), "--minari", "cartpole/n-step-v0", env=datasets)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"raypex: error: {tmp_path}: its replay holds 3-step returns, sequences or clipped rewards, not each step's "
        "reward: --minari takes a run of a feed-forward algorithm with algo.n_step 1 and env.clip_rewards false"]
