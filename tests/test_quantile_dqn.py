"""QR-DQN and IQN as plug-ins: the quantile Huber loss against a hand-computed case, the networks'
quantiles and Q-values (IQN's cosine embedding's shapes), prioritized replay weighed by each
transition's own loss, and CartPole solved by each through collectors, the evaluator and
policy.pt2 as DQN's is."""

import json

import numpy as np
import pytest
import torch

from raypex.cluster.commands.cli import main
from raypex.learner.implicit_quantile_networks import COSINES, ImplicitQuantileNetwork
from raypex.learner.quantile_loss import implicit_quantile_loss, quantile_dqn_loss, quantile_fractions, quantile_huber
from raypex.learner.quantile_networks import QuantileQNetwork


def test_the_quantile_huber_loss_of_a_hand_computed_case():
    # N = 2: tau = 0.25, 0.75; predicted 0 and 1; target 0.5 and 2 (kappa 1).
    #   i=0: u = 0.5, 2.0, both >= 0: weight 0.25; huber 0.125, 1.5 -> mean_j 0.25 * 0.8125 = 0.203125
    #   i=1: u = -0.5 (weight |0.75 - 1| = 0.25, huber 0.125), 1.0 (weight 0.75, huber 0.5) -> mean_j 0.203125
    assert quantile_fractions(2).tolist() == [0.25, 0.75]
    predicted, target = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 2.0]])
    assert quantile_huber(predicted, target, kappa=1.0).item() == pytest.approx(0.40625)
    # kappa 2: huber_2(u) / 2 = u^2 / 4 for |u| <= 2: i=0: 0.25 * (0.0625 + 1.0) / 2, i=1: (0.25 * 0.0625 + 0.75 * 0.25) / 2
    assert quantile_huber(predicted, target, kappa=2.0).item() == pytest.approx(0.1328125 + 0.1015625)
    # a point target met by every quantile costs nothing; a quantile above its target costs by 1 - tau, below it by tau
    assert quantile_huber(torch.full((1, 3), 1.5), torch.full((1, 3), 1.5), 1.0).item() == 0.0
    low, high = quantile_huber(torch.tensor([[0.0]]), torch.tensor([[1.0]]), 1.0), quantile_huber(
        torch.tensor([[2.0]]), torch.tensor([[1.0]]), 1.0)
    assert low.item() == high.item() == pytest.approx(0.5 * 0.5)  # N = 1: tau 0.5 either side


def test_the_networks_q_values_are_its_quantiles_mean_and_its_dueling_head_is_per_quantile():
    torch.manual_seed(0)
    network = QuantileQNetwork((4,), 3, 8, [16], dueling=True, obs_dtype="float32")
    obs = torch.randn(5, 4)
    quantiles = network.quantiles(obs)
    assert quantiles.shape == (5, 3, 8)
    torch.testing.assert_close(network(obs), quantiles.mean(dim=2))
    value = network.body(obs)[:, 3 * 8:]
    torch.testing.assert_close(quantiles.mean(dim=1), value)  # the advantages average to zero, quantile by quantile


def test_each_transitions_own_loss_is_its_priority_and_the_gradient_reaches_the_network():
    torch.manual_seed(0)
    online = QuantileQNetwork((4,), 2, 4, [8], dueling=False, obs_dtype="float32")
    target = QuantileQNetwork((4,), 2, 4, [8], dueling=False, obs_dtype="float32")
    obs, next_obs = torch.randn(6, 4), torch.randn(6, 4)
    out = quantile_dqn_loss(online, target, obs, torch.tensor([0, 1, 0, 1, 1, 0]), torch.ones(6),
                            torch.tensor([0.99, 0.99, 0.0, 0.99, 0.99, 0.99]), next_obs, None, 1.0)
    assert out.priority.shape == (6,) and (out.priority > 0).all()
    torch.testing.assert_close(out.loss, out.priority.mean())
    out.loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in online.parameters())
    terminal = out.td_target[2]  # discount 0: the target is the return alone, every quantile of it
    assert terminal.item() == pytest.approx(1.0)


def test_drawn_fractions_weigh_the_loss_and_iqns_embedding_has_its_shapes():
    # the hand-computed case above, its fractions given: the same loss
    predicted, target = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 2.0]])
    assert quantile_huber(predicted, target, 1.0, torch.tensor([[0.25, 0.75]])).item() == pytest.approx(0.40625)
    # fractions near 0 and 1: a quantile below its target costs by tau (little), above by 1 - tau (little)
    assert quantile_huber(torch.tensor([[0.0]]), torch.tensor([[1.0]]), 1.0, torch.tensor([[0.1]])).item() == (
        pytest.approx(0.1 * 0.5))
    torch.manual_seed(0)
    network = ImplicitQuantileNetwork((4,), 3, [32, 16], dueling=True, obs_dtype="float32", acting_quantiles=8)
    obs, fractions = torch.randn(5, 4), torch.rand(5, 7)
    assert network.embed(fractions).shape == (5, 7, 16) and network.embedding.in_features == COSINES
    quantiles = network.quantiles(obs, fractions)
    assert quantiles.shape == (5, 3, 7)
    torch.testing.assert_close(network(obs), network.quantiles(obs, network.acting_fractions.expand(5, -1)).mean(2))
    torch.testing.assert_close(network(obs), network(obs))  # acting draws nothing: the same Q for the same obs
    low, high = network.quantiles(obs, torch.full((5, 1), 0.05)), network.quantiles(obs, torch.full((5, 1), 0.95))
    assert not torch.equal(low, high)  # the fraction reaches the output
    out = implicit_quantile_loss(network, network, obs, torch.tensor([0, 1, 2, 0, 1]), torch.ones(5),
                                 torch.full((5,), 0.99), obs, None, 1.0, samples=6)
    assert out.priority.shape == (5,) and out.loss.requires_grad


@pytest.mark.parametrize("algo", ["qrdqn", "iqn"])
def test_each_solves_cartpole_and_its_policy_file_acts_on_the_mean(algo, tmp_path, capsys):
    from raypex.learner.policy_file import load_policy

    run = tmp_path / "run"
    code = main(["train", "--local", "--run-dir", str(run), f"algo.name={algo}", "replay.prioritized=true",
                 "eval.video_every=0"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ended"] == "solved", summary
    policy = load_policy(run / "policy.pt2")
    q = policy.q_values(np.zeros((3, 4), np.float32))
    assert q.shape == (3, 2) and policy.act(np.zeros((3, 4), np.float32)).tolist() == q.argmax(dim=1).tolist()


def test_learner_compile_compiles_qrdqns_loss_and_it_trains_as_the_eager_one_does():
    """The quantile networks' quantiles are not their forward: learner.compile compiles QR-DQN's
    loss whole, and the compiled updates move the network as the eager ones do."""
    from tests.test_learner import learner_for, settings

    trained = {}
    for compiled in (False, True):
        learner = learner_for(settings(algo="qrdqn", quantiles=8, compile=compiled, accumulation_steps=2))
        learner.warmup()
        before = [p.detach().clone() for p in learner.step.online.parameters()]
        losses = [learner.train_epoch().losses["td_loss"] for _ in range(2)]
        assert learner.compiled == compiled
        assert (learner.step.loss_fn is quantile_dqn_loss) != compiled
        trained[compiled] = ([p.detach() for p in learner.step.online.parameters()], losses)
    (eager, eager_losses), (ours, our_losses) = trained[False], trained[True]
    assert any(not torch.equal(a, b) for a, b in zip(before, ours))
    for a, b in zip(eager, ours, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert our_losses == pytest.approx(eager_losses, rel=1e-4)
