"""policy.pt2 holds the version README promises: the one whose evaluation solved the run, else
the best evaluated (a real run in the local runtime, CartPole, read back through load_policy)."""

import io
import json
import time

import numpy as np
import pytest

from raypex.actors.envs import inspect_env
from raypex.actors.onnx_acting import GraphQ
from raypex.cluster.config.loading import load_config
from raypex.cluster.driver.observer import RunObserver
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.run import TrainingRun
from raypex.cluster.local.runtime import LocalRuntime
from raypex.learner.policy_file import load_policy


def _q_values(weights, obs):
    """What collectors and the evaluator act on for these published weights: their acting graph's."""
    forward = GraphQ(2, np.random.default_rng(0))
    forward.load(weights)
    return forward.q_values(obs)


class NewestWeights(RunObserver):
    """Keeps the newest weights the learner published when learning ended (what an export that
    ignored the evaluations would take)."""

    def __init__(self):
        self.weights = None

    def before_finish(self, run) -> None:
        self.weights = run.rt.get(run.rt.call(run.actors.learner, "published_weights"))


@pytest.mark.parametrize("stop", ["solved", "env_steps"])
def test_policy_pt2_holds_the_solving_else_the_best_evaluated_version(stop, tmp_path):
    ending = ["stop.eval_return=60", "stop.env_steps=60000"] if stop == "solved" else \
        ["stop.eval_return=null", "stop.env_steps=6000"]
    config = load_config(None, ["seed=3", "eval.every_env_steps=800", "eval.episodes=4", *ending])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    newest = NewestWeights()
    run = TrainingRun(config, spec, tmp_path, LocalRuntime(), time.time(), ProgressLine(io.StringIO()),
                      observers=(newest,))
    assert run.execute(config_text="test") == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ended"] == stop
    outcome = run.outcome
    chosen = outcome.solved if stop == "solved" else outcome.best  # the best includes the final evaluation
    assert chosen is not None and (outcome.solved is None) == (stop == "env_steps")
    weights = run.rt.get(chosen.weights)
    assert summary["policy_version"] == chosen.version == weights.version
    assert summary["policy_eval_return"] == chosen.mean

    obs = np.random.default_rng(0).normal(size=(256, *spec.obs_shape)).astype(np.float32)
    exported = load_policy(tmp_path / "policy.pt2").q_values(obs).numpy()
    np.testing.assert_allclose(exported, _q_values(weights, obs), rtol=1e-5, atol=1e-5)
    if newest.weights.version != chosen.version:  # the newest weights would have given other values
        assert not np.allclose(exported, _q_values(newest.weights, obs), atol=1e-3)
