"""The categorical critic (network.critic_head categorical): HL-Gauss targets and the cross-entropy
against a hand-computed case, the twin critics' loss through it, its settings refused in one line
where they cannot serve, and Pendulum solved with it."""

import json
import math

import pytest
import torch

from raypex.cluster.commands.cli import main
from raypex.cluster.config.loading import ConfigError, load_config
from raypex.learner.actor_critic_networks import ActorNetwork, TwinCritic
from raypex.learner.categorical_critic import HLGaussSupport
from raypex.learner.sale import SaleTwinCritic
from raypex.learner.td3_loss import twin_critic_loss


def test_hl_gauss_targets_and_the_cross_entropy_of_a_hand_computed_case():
    support = HLGaussSupport(0.0, 2.0, 2)  # intervals [0, 1] and [1, 2], centres 0.5 and 1.5, sigma 0.75
    assert support.centers.tolist() == [0.5, 1.5] and support.sigma == 0.75
    # y = 0.5: the Gaussian's mass on each interval, over its mass on [0, 2]
    scale = math.sqrt(2) * 0.75
    edges = [math.erf((e - 0.5) / scale) for e in (0.0, 1.0, 2.0)]
    p0 = (edges[1] - edges[0]) / (edges[2] - edges[0])
    assert p0 == pytest.approx(0.683008, abs=1e-6)
    torch.testing.assert_close(support.target_distribution(torch.tensor([0.5, 1.0])),
                               torch.tensor([[p0, 1 - p0], [0.5, 0.5]]))
    # logits [1, 0]: log softmax = [1 - ln(1 + e), -ln(1 + e)], so the loss is ln(1 + e) - p0
    loss = support.loss(torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(loss, torch.tensor([math.log(1 + math.e) - p0, math.log(2.0)]))
    assert support.expected(torch.zeros(1, 2)).item() == pytest.approx(1.0)
    # a target beyond the support counts as its end
    torch.testing.assert_close(support.target_distribution(torch.tensor([9.0])),
                               support.target_distribution(torch.tensor([2.0])))


def test_the_twin_critics_train_their_logits_by_cross_entropy_and_report_their_mean():
    torch.manual_seed(0)
    support = HLGaussSupport(-10.0, 10.0, 51)
    critic = TwinCritic((3,), 1, [16], support=support)
    target_critic = TwinCritic((3,), 1, [16], support=support).requires_grad_(False)
    obs, next_obs, action = torch.randn(4, 3), torch.randn(4, 3), torch.rand(4, 1) * 2 - 1
    returns, discount = torch.tensor([1.0, -2.0, 0.5, 30.0]), torch.full((4,), 0.9)
    out = twin_critic_loss(critic, target_critic, obs, action, returns, discount, next_obs, torch.zeros(4, 1), 0.0, None)
    q1_next, q2_next = target_critic(next_obs, torch.zeros(4, 1))
    target = returns + 0.9 * torch.minimum(q1_next, q2_next)
    logits1, logits2 = critic.logits(obs, action)
    assert logits1.shape == (4, 51)
    torch.testing.assert_close(out.target, target)
    torch.testing.assert_close(out.loss, (support.loss(logits1, target) + support.loss(logits2, target)).mean())
    torch.testing.assert_close(out.td_error, support.expected(logits1).detach() - target)
    out.loss.backward()
    assert critic.q1_out.weight.grad.abs().sum() > 0 and critic.q2_out.weight.grad.abs().sum() > 0
    # with critic_norm layer_norm, a LayerNorm in each hidden layer of each critic
    normed = TwinCritic((3,), 1, [16, 16], layer_norm=True, support=support)
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in normed.modules()) == 4
    # the actor reads the mean, with a gradient through the action
    actor = ActorNetwork((3,), 1, [16], gaussian=False)
    q1, _ = critic(obs, actor(obs))
    q1.sum().backward()
    assert actor.mean.weight.grad.abs().sum() > 0


def test_sale_critics_give_logits_over_the_support_and_train_them_by_cross_entropy():
    torch.manual_seed(0)
    support = HLGaussSupport(-10.0, 10.0, 51)
    critic = SaleTwinCritic(3, 1, [16, 16], support)
    obs, next_obs, action = torch.randn(4, 3), torch.randn(4, 3), torch.rand(4, 1) * 2 - 1
    logits1, logits2 = critic.logits(obs, action)
    assert logits1.shape == logits2.shape == (4, 51)
    q1, q2 = critic(obs, action)
    torch.testing.assert_close(q1, support.expected(logits1))
    # SALE's value clipping bounds the next Q before its HL-Gauss distribution is taken
    bounds = torch.tensor([-1.0, 1.0])
    target_critic = SaleTwinCritic(3, 1, [16, 16], support).requires_grad_(False)
    returns, discount = torch.tensor([1.0, -2.0, 0.5, 30.0]), torch.full((4,), 0.9)
    out = twin_critic_loss(critic, target_critic, obs, action, returns, discount, next_obs, torch.zeros(4, 1), 0.0,
                           None, next_q_bounds=bounds)
    next_q = torch.minimum(*target_critic(next_obs, torch.zeros(4, 1))).clamp(-1.0, 1.0)
    torch.testing.assert_close(out.target, returns + 0.9 * next_q)
    torch.testing.assert_close(out.loss, (support.loss(logits1, out.target) + support.loss(logits2, out.target)).mean())
    out.loss.backward()
    assert critic.q1_out.weight.grad.abs().sum() > 0 and critic.q2_project.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(("overrides", "said"), [
    (["network.critic_head=categorical"], "critic_head categorical needs network.critic_range [low, high]"),
    (["network.critic_range=[0, 1]"], "critic_range is the categorical critic's support: set network.critic_head"),
    (["network.critic_head=categorical", "network.critic_range=[5, 1]"], "critic_range [5.0, 1.0]: low must be below"),
    (["algo.name=dqn", "network.critic_head=categorical", "network.critic_range=[0, 1]"],
     "network.critic_head categorical is for td3's and sac's critics; for a distribution over returns with "
     "Discrete actions use algo.name qrdqn or iqn"),
])
def test_settings_the_categorical_critic_cannot_take_are_one_line(overrides, said):
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["algo.name=sac", *overrides])
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_sac_with_the_categorical_critic_solves_pendulum(tmp_path, capsys):
    run = tmp_path / "run"
    # Pendulum's discounted returns lie in about [-1650, 0]
    code = main(["train", "pendulum", "--local", "--run-dir", str(run), "network.critic_head=categorical",
                 "network.critic_range=[-1700, 100]", "eval.video_every=0"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ended"] == "solved", summary
