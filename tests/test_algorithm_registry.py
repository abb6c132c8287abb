"""The algorithm registry: each algorithm is one plug-in found by `algo.name`, and a new one is a
new plug-in alone: registered here (as a module of learner/algorithms/ would be), it passes config
validation, acts in collectors and the evaluator, trains and exports through a real `--local` run
with no other code knowing its name."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from raypex.actors.policy import Stateless
from raypex.cluster.commands.cli import main
from raypex.learner.algorithms import registry
from raypex.learner.algorithms.registry import algorithm, names, register


def test_the_registry_holds_dqn_td3_and_sac_with_what_differs_between_them():
    assert names()[:3] == ("dqn", "td3", "sac")
    assert [algorithm(name).acts_on_gpu for name in ("dqn", "td3", "sac", "r2d2")] == [True, False, False, False]
    assert [algorithm(name).box_actions for name in ("dqn", "td3", "sac")] == [False, True, True]
    assert algorithm("td3").collector_noise and not algorithm("sac").collector_noise
    assert (algorithm("td3").default_policy_delay, algorithm("sac").default_policy_delay) == (2, 1)


def test_an_unknown_name_is_one_line_naming_the_registered_ones(capsys):
    with pytest.raises(ValueError, match="algo.name ppo is not an algorithm raypex has; one of dqn, td3, sac, r2d2, "
                                         "qrdqn, iqn"):
        algorithm("ppo")
    assert main(["train", "--local", "algo.name=ppo"]) == 2
    assert capsys.readouterr().err.strip() == ("raypex: error: config error: algo.name: one of dqn, td3, sac, r2d2, "
                                               "qrdqn, iqn, the registered algorithms (got 'ppo')")


@pytest.fixture
def plugged_in():
    """A plug-in registered for the test: DQN's step and acting under another name."""
    from raypex.learner.algorithms.dqn import DQN

    @register
    class PlainQ(DQN):
        name = "plain-q"
        built = 0

        def build_step(self, settings, device, gather=None, precision=None):
            from raypex.learner.dqn_step import DQNStep

            type(self).built += 1
            return DQNStep(settings, device, gather, precision)

    yield PlainQ
    del registry._registry["plain-q"]


class BoltzmannPolicy(Stateless):
    """Acting of the test's own: actions sampled from softmax(Q / temperature) over the Q-values of
    the published acting graph (DQN's network; no head of raypex's), uniformly at random before the
    first weights; greedy without a temperature."""

    precision, form, exploration, acts_with_untrained_weights = "fp32", "onnx, boltzmann", "temperature", True
    calls = 0  # acts, over every instance: the run must have acted through this class

    def __init__(self, num_actions: int, temperature: float | None, rng: np.random.Generator):
        from raypex.actors.onnx_acting import GraphForward

        self.num_actions, self.temperature, self.rng = num_actions, temperature, rng
        self.graph = GraphForward()

    def load(self, weights):
        self.graph.load(weights)

    def exploration_rate(self, env_steps):
        return self.temperature or 0.0

    def act(self, obs, state, env_steps, explore=True):
        type(self).calls += 1
        if not self.graph.loaded:
            return self.rng.integers(0, self.num_actions, len(obs)), {}, None
        (q,) = self.graph.run(obs=obs)
        if not explore or self.temperature is None:
            return q.argmax(axis=1), {}, None
        logits = (q - q.max(axis=1, keepdims=True)) / self.temperature
        cumulative = np.cumsum(np.exp(logits), axis=1)
        draws = self.rng.random(len(q))[:, None] * cumulative[:, -1:]
        return (draws > cumulative).sum(axis=1), {}, None


@pytest.fixture
def boltzmann():
    """A plug-in whose collectors act by Boltzmann sampling over a Q-network: DQN's learning, its
    own acting, nothing else of raypex's changed."""
    from raypex.learner.algorithms.dqn import DQN

    @register
    class Boltzmann(DQN):
        name = "boltzmann-test"

        def policy(self, settings, example_obs, seed, rng):
            return BoltzmannPolicy(settings.num_actions, 1.0, rng)

        def greedy_policy(self, settings):
            return BoltzmannPolicy(settings.num_actions, None, np.random.default_rng(settings.seed))

    yield Boltzmann
    del registry._registry["boltzmann-test"]


def test_a_plug_in_with_acting_of_its_own_solves_cartpole_and_exports_its_policy(boltzmann, tmp_path, capsys):
    """Collectors explore and the evaluator acts through the plug-in's policy; policy.pt2 holds its
    network; CartPole is solved."""
    import json

    from raypex.learner.policy_file import load_policy

    run = tmp_path / "run"
    code = main(["train", "--local", "--run-dir", str(run), "algo.name=boltzmann-test", "stop.env_steps=60000",
                 "eval.video_every=0"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ended"] == "solved" and BoltzmannPolicy.calls > 1000, (summary, BoltzmannPolicy.calls)
    policy = load_policy(run / "policy.pt2")
    assert policy.act(np.zeros((3, 4), np.float32)).shape == (3,)


def test_a_new_plug_in_trains_end_to_end_with_nothing_else_changed(plugged_in, tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["train", "--local", "--run-dir", str(run), "algo.name=plain-q", "stop.env_steps=3000",
                 "stop.eval_return=null", "eval.video_every=0"])
    assert code == 0, capsys.readouterr().err
    assert plugged_in.built == 1 and (run / "policy.pt2").is_file()
    assert main(["train", "--local", "algo.name=plain-q", "env.id=Pendulum-v1"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "raypex: error: algo.name plain-q needs Discrete actions; env.id 'Pendulum-v1' has a Box action space of shape "
        "(1,): use algo.name td3 or sac")


def test_an_update_that_cannot_be_captured_runs_eagerly_on_a_gpu():
    """r2d2's plug-in says its update is not captured: auto turns CUDA graphs off for it (a GPU
    learner would otherwise try), and asking for them is refused in one line."""
    from raypex.actors.envs import inspect_env
    from raypex.cluster.config.loading import ConfigError, load_config
    from raypex.cluster.plan.settings import learner_settings

    spec = inspect_env("CartPole-v1", {})
    assert learner_settings(load_config(None, ["algo.name=r2d2"]), spec).captures("cuda") is False
    assert learner_settings(load_config(None, []), spec).captures("cuda") is True
    with pytest.raises(ConfigError, match="algo.name r2d2's update is not captured as CUDA graphs yet"):
        load_config(None, ["algo.name=r2d2", "learner.cuda_graphs=on", "learner.device=cuda"])


def in_fresh_python(code: str, site: Path | None = None) -> subprocess.CompletedProcess:
    """`code` run by a new interpreter (the registry is per process), `site` on its path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([str(site)] if site else []) or root
    if site:
        env["PYTHONPATH"] += os.pathsep + root
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


def test_an_algorithm_registered_before_the_first_lookup_hides_no_built_in():
    done = in_fresh_python("""
        from raypex.learner.algorithms.registry import Algorithm, algorithm, names, register

        @register
        class Early(Algorithm):
            name = "early"

        print(",".join(names()), algorithm("dqn").name)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["dqn,td3,sac,r2d2,qrdqn,iqn,early", "dqn"]


def installed_package(site: Path, entry: str, module: str) -> Path:
    """A package `userq` as pip leaves it in site-packages: its module and a dist-info whose
    entry_points.txt names `entry` in the raypex.algorithms group."""
    site.mkdir()
    (site / "userq.py").write_text(textwrap.dedent(module))
    info = site / "userq-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: userq\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[raypex.algorithms]\n{entry}\n")
    return site


USER_Q = """
    from raypex.learner.algorithms.dqn import DQN

    class UserQ(DQN):
        name = "user-q"

        def build_step(self, settings, device, gather=None, precision=None):
            from raypex.learner.dqn_step import DQNStep

            return DQNStep(settings, device, gather, precision)
"""


def test_an_installed_packages_entry_point_adds_its_algorithm_beside_the_built_ins(tmp_path):
    site = installed_package(tmp_path / "site", "user-q = userq:UserQ", USER_Q)
    done = in_fresh_python("""
        from raypex.learner.algorithms.registry import algorithm, names

        print(",".join(names()), type(algorithm("user-q")).__name__)
    """, site)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["dqn,td3,sac,r2d2,qrdqn,iqn,user-q", "UserQ"]


def test_an_entry_point_that_does_not_load_is_one_line_naming_it(tmp_path):
    site = installed_package(tmp_path / "site", "user-q = userq:Missing", USER_Q)
    done = in_fresh_python("""
        import sys
        from raypex.cluster.commands.cli import main

        sys.exit(main(["train", "--local", "algo.name=user-q"]))
    """, site)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "raypex: error: config error: algo.name: the raypex.algorithms entry point user-q = userq:Missing does not "
        "load (AttributeError: module 'userq' has no attribute 'Missing') (got 'user-q')"]


def test_served_acting_of_a_plug_in_whose_policy_cannot_be_served_is_refused_naming_it(boltzmann):
    from raypex.cluster.config.loading import ConfigError, load_config

    with pytest.raises(ConfigError, match="collectors.acting served: algo.name boltzmann-test's plug-in builds its "
                                          r"policy without `served` \(Algorithm.policy\)"):
        load_config(None, ["algo.name=boltzmann-test", "collectors.acting=served"])
    assert load_config(None, ["algo.name=dqn", "collectors.acting=served"]).collectors.acting == "served"
