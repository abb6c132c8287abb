"""The acting graph (learner/acting_graph.py, actors/onnx_acting.py): each built-in plug-in's acting
module, exported once, run in ONNX Runtime with published arrays fed as its inputs, gives what the
torch module gives, for every network form it acts with; the policies built on it act at random until
weights come, follow each new version with the same graph, sample SAC's actions as the torch actor
does; and a process that acts with it never imports torch."""

import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from raypex.actors.onnx_acting import GraphForward, GraphQ, q_acts_with_graph
from raypex.learner.acting_graph import export_acting_graph
from raypex.learner.actor_critic_networks import ActorNetwork
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.networks import build_q_network
from raypex.learner.recurrent_networks import RecurrentQNetwork, StatefulQ
from raypex.learner.weights import export_arrays
from raypex.replay.contracts import Weights


def _trained_looking(network: nn.Module, seed: int) -> nn.Module:
    """Weights far from the init's (LayerNorm's start at 1 and 0), buffers included."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in network.state_dict().items():
            if tensor.dtype.is_floating_point:
                noise = torch.randn(tensor.shape, generator=generator)
                tensor.copy_(tensor.abs() + 0.5 + noise.abs() if name.endswith("var") else tensor * 3.0 + noise * 0.5)
    return network.eval()


def _obs(shape, dtype, batch=32, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "uint8":
        return rng.integers(0, 256, (batch, *shape), dtype=np.uint8)
    return (rng.normal(size=(batch, *shape)) * 3).astype(np.float32)


def _weights(algo: str, network: nn.Module, shape, dtype, version: int = 1) -> Weights:
    graph = export_acting_graph(algorithm(algo), network, tuple(shape), dtype)
    return Weights(version, export_arrays(network), acting_graph=graph)


Q_NETWORKS = [((4,), "float32", [64, 64], True, False), ((4,), "float32", [32], False, True),
              ((4,), "float32", [], True, False), ((4, 10, 10), "uint8", [64], True, False),
              ((4, 84, 84), "uint8", [64], True, False)]


@pytest.mark.parametrize(("shape", "dtype", "hidden", "dueling", "layer_norm"), Q_NETWORKS)
def test_a_q_networks_graph_gives_its_q_values_and_greedy_actions(shape, dtype, hidden, dueling, layer_norm):
    torch.manual_seed(0)
    network = _trained_looking(build_q_network(shape, 5, hidden, dueling, dtype, layer_norm), 1)
    forward = GraphQ(5, np.random.default_rng(0))
    obs = _obs(shape, dtype)
    forward.load(_weights("dqn", network, shape, dtype))
    with torch.inference_mode():
        expected = network(torch.from_numpy(obs)).numpy()
    tolerance = 1e-5 * np.abs(expected).max()  # float32 sums in another order, over large values
    np.testing.assert_allclose(forward.q_values(obs), expected, rtol=1e-5, atol=tolerance)
    top_two = np.sort(expected, axis=1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 2 * tolerance  # rows whose best action no rounding can change
    assert clear.sum() > len(obs) // 2
    assert np.array_equal(forward.greedy(obs)[clear], expected.argmax(axis=1)[clear])


@pytest.mark.parametrize(("shape", "dtype", "core"), [((6,), "float32", "lstm"), ((6,), "float32", "mlp"),
                                                      ((3, 10, 10), "uint8", "lstm")])
def test_a_recurrent_graph_steps_as_the_torch_network_state_in_and_out(shape, dtype, core):
    torch.manual_seed(0)
    network = _trained_looking(RecurrentQNetwork(shape, 4, [32], 16, True, core, dtype), 2)
    graph = GraphForward()
    graph.load(_weights("r2d2", network, shape, dtype))
    state = np.zeros((8, 32), np.float32)
    for step in range(3):  # the state each step gives is the next one's
        obs = _obs(shape, dtype, 8, seed=step)
        q, state_out = graph.run(obs=obs, state=state)
        with torch.inference_mode():
            q_torch, state_torch = StatefulQ(network)(torch.from_numpy(obs), torch.from_numpy(state))
        np.testing.assert_allclose(q, q_torch.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(state_out, state_torch.numpy(), rtol=1e-5, atol=1e-5)
        state = state_out
    assert np.abs(state).sum() > 0


ACTORS = [((3,), "float32", {}), ((3,), "float32", {"obs_norm": True}), ((5,), "float32", {"sale": True}),
          ((3, 10, 10), "uint8", {})]


@pytest.mark.parametrize(("shape", "dtype", "options"), ACTORS)
@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_an_actors_graph_gives_its_actions_and_sac_samples_as_the_torch_actor(algo, shape, dtype, options):
    from raypex.actors.continuous_acting import ActorPolicy

    gaussian = algo == "sac"
    torch.manual_seed(0)
    actor = _trained_looking(ActorNetwork(shape, 2, [32, 32], gaussian, dtype, **options), 3)
    obs = _obs(shape, dtype, 16)
    policy = ActorPolicy(gaussian, 2, 0.0, np.random.default_rng(5))
    policy.load(_weights(algo, actor, shape, dtype))
    means = []  # the action means before tanh: up to 27 here, as a trained actor's are
    hook = actor.mean.register_forward_hook(lambda module, inputs, output: means.append(output))
    with torch.inference_mode():
        deterministic = actor(torch.from_numpy(obs)).numpy()
    hook.remove()
    # float32 sums in another order, over large values (as the Q forward's test): 1e-5 of the
    # largest mean, which tanh (slope at most 1) cannot widen
    tolerance = 1e-5 * max(1.0, float(means[0].abs().max()))
    np.testing.assert_allclose(policy.act(obs, None, 0, explore=False)[0], deterministic, atol=tolerance)
    if gaussian:  # the same standard normal draws give the torch actor's sample
        noise = np.random.default_rng(5).standard_normal((16, 2)).astype(np.float32)
        with torch.inference_mode():
            sampled, _ = actor.sample(torch.from_numpy(obs), torch.from_numpy(noise))
        np.testing.assert_allclose(policy.act(obs, None, 0)[0], sampled.numpy(), atol=tolerance)


def test_the_q_forward_acts_at_random_until_weights_then_follows_each_version_with_one_graph():
    assert q_acts_with_graph((4,), "auto", "auto") and q_acts_with_graph((4,), "fp32", "off")
    assert not q_acts_with_graph((4,), "bf16", "auto") and not q_acts_with_graph((4,), "auto", "on")
    assert not q_acts_with_graph((4, 84, 84), "auto", "auto")  # a CNN acts in the form its timing chose
    forward = GraphQ(3, np.random.default_rng(0))
    obs = _obs((4,), "float32", 600)
    assert set(forward.greedy(obs).tolist()) == {0, 1, 2} and not forward.q_values(obs).any()  # the warm-up
    torch.manual_seed(0)
    network = build_q_network((4,), 3, [32, 32], True, "float32")
    first = _weights("dqn", network, (4,), "float32", version=1)
    forward.load(first)
    session = forward.graph.session
    _trained_looking(network, 4)
    forward.load(Weights(2, export_arrays(network), acting_graph=first.acting_graph))
    assert forward.graph.session is session  # the same graph: only the feed changed
    with torch.inference_mode():
        np.testing.assert_allclose(forward.q_values(obs), network(torch.from_numpy(obs)).numpy(), rtol=1e-5, atol=1e-4)


def test_weights_without_a_graph_or_without_its_arrays_are_refused_in_one_line():
    network = build_q_network((4,), 2, [8], True, "float32")
    graph = GraphForward()
    with pytest.raises(ValueError, match=r"^weights version 3 carry no acting graph"):
        graph.load(Weights(3, export_arrays(network)))
    weights = _weights("dqn", network, (4,), "float32", version=4)
    del weights.arrays["advantage.bias"]
    with pytest.raises(ValueError, match=r"^weights version 4 lack the acting graph's advantage.bias$"):
        graph.load(weights)


class _Scaled(nn.Module):
    """An acting module holding a tensor of its own, which no published array feeds."""

    def __init__(self, network):
        super().__init__()
        self.network = network
        self.register_buffer("scale", torch.ones(1))

    def forward(self, obs):
        return self.network(obs) * self.scale


def test_an_acting_module_with_a_tensor_the_network_lacks_is_refused_naming_it():
    class Scaling(type(algorithm("dqn"))):
        def acting_module(self, network):
            return _Scaled(network)

    with pytest.raises(ValueError, match="the acting module's scale is not a tensor of the published network"):
        export_acting_graph(Scaling(), build_q_network((4,), 2, [8], True, "float32"), (4,), "float32")


ACTING_WITHOUT_TORCH = """
import pickle, sys
import numpy as np
from raypex.learner.algorithms.registry import algorithm
cases = pickle.load(open(sys.argv[1], "rb"))
for settings, weights, obs in cases:
    policy = algorithm(settings.algo).policy(settings, obs, 0, np.random.default_rng(0))
    policy.load(weights)
    actions, _, _ = policy.act(obs, policy.initial_state(len(obs)), 0)
    assert len(actions) == len(obs) and policy.form == "onnx", settings.algo
print("torch" in sys.modules)
"""


def test_collectors_acting_with_the_graph_never_import_torch(tmp_path):
    """DQN on CartPole's observations, R2D2, SAC and TD3 (on images too): the collector builds its
    plug-in's policy, takes weights and acts in a process that has never imported torch."""
    from raypex.actors.settings import CollectorSettings

    cases = []
    for algo, shape, dtype, extra in [("dqn", (4,), "float32", {"num_actions": 2}),
                                      ("r2d2", (4,), "float32", {"num_actions": 2, "recurrent_size": 8}),
                                      ("sac", (3,), "float32", {"action_low": (-1.0, -1.0), "action_high": (1.0, 1.0)}),
                                      ("td3", (3, 10, 10), "uint8", {"action_low": (-2.0,), "action_high": (2.0,)})]:
        s = CollectorSettings(index=0, num_collectors=1, env_id="x", env_kwargs={}, num_envs=4, obs_shape=shape,
                              obs_dtype=dtype, num_actions=extra.pop("num_actions", 0), hidden=[16], dueling=True,
                              n_step=1, gamma=0.99, chunk_steps=8, epsilon_base=0.4, epsilon_alpha=7.0,
                              epsilon_anneal_steps=0, seed=0, algo=algo, **extra)
        network = algorithm(algo).acting_network(s)
        cases.append((s, _weights(algo, network, shape, dtype), _obs(shape, dtype, 4)))
    (tmp_path / "cases.pkl").write_bytes(pickle.dumps(cases))
    out = subprocess.run([sys.executable, "-c", ACTING_WITHOUT_TORCH, str(tmp_path / "cases.pkl")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_the_learner_exports_without_importing_onnx_and_the_graph_is_the_exporters_own(tmp_path):
    """The exporter's last step, which imports onnx (0.6 s of a learner's start) to add onnxscript
    functions, is skipped: in a fresh process the export leaves onnx unimported, and its bytes are
    what the whole exporter writes."""
    code = """
import sys
from raypex.learner.acting_graph import export_acting_graph, without_onnxscript_functions
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.networks import build_q_network
network = build_q_network((4,), 2, [16], True, "float32")
fast = export_acting_graph(algorithm("dqn"), network, (4,), "float32")
print("onnx" in sys.modules)
from torch.onnx._internal.torchscript_exporter import onnx_proto_utils
onnx_proto_utils._add_onnxscript_fn.__code__  # the step is there under the name skipped
with without_onnxscript_functions():
    assert onnx_proto_utils._add_onnxscript_fn.__name__ == "<lambda>"
assert onnx_proto_utils._add_onnxscript_fn.__name__ == "_add_onnxscript_fn"
import raypex.learner.acting_graph as acting_graph
acting_graph.without_onnxscript_functions = __import__("contextlib").nullcontext
print(export_acting_graph(algorithm("dqn"), network, (4,), "float32") == fast)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]
