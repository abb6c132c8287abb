"""SALE embeddings (network.sale, learner/sale.py): what the actor and critics read moves only at
the target period, the targets read the period before's, the next Q-value is clipped to the
targets seen up to the last period (TD7's), and collectors (numpy) and policy.pt2 act as the learner's actor does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raypex.actors.continuous_acting import ActorPolicy
from raypex.learner.acting_graph import export_acting_graph
from raypex.learner.actor_critic_step import ActorCriticStep
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.policy_file import ExportedPolicy, export_policy_archive, load_policy
from raypex.learner.td3_loss import twin_critic_loss
from raypex.learner.weights import export_arrays
from raypex.replay.contracts import Weights
from tests.test_learner import settings

OBS, ACTIONS, PERIOD = 5, 2, 3


def sale_step(algo: str) -> ActorCriticStep:
    s = settings(obs_shape=(OBS,), num_actions=0, algo=algo, action_low=(-1.0,) * ACTIONS, action_high=(2.0,) * ACTIONS,
                 hidden=[16, 16], target_update="hard", target_update_every=PERIOD, micro_batch=32, sale=True,
                 policy_delay=2 if algo == "td3" else 1)
    return algorithm(s.algo).build_step(s, torch.device("cpu"))


def batch(rng: np.random.Generator, size: int = 32) -> dict[str, torch.Tensor]:
    obs = torch.from_numpy(rng.normal(size=(1, size, OBS)).astype(np.float32))
    return {"obs": obs, "action": torch.from_numpy(rng.uniform(-1, 1, (1, size, ACTIONS)).astype(np.float32)),
            "return": torch.from_numpy(rng.normal(size=(1, size)).astype(np.float32)),
            "discount": torch.full((1, size), 0.99), "next_obs": obs + 0.1}


def flat(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in module.parameters()]).clone()


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_the_frozen_embeddings_move_only_at_the_target_period_and_the_targets_keep_the_period_before(algo):
    step, rng = sale_step(algo), np.random.default_rng(0)
    first = flat(step.sale.encoder)
    assert torch.equal(flat(step.critic.embedding), first) and torch.equal(flat(step.actor.encoder.embedding),
                                                                            flat(step.sale.encoder.state))
    for update in range(1, PERIOD):
        step(batch(rng))
        step.after_update(update)
    trained = flat(step.sale.encoder)
    assert not torch.equal(trained, first)  # the encoder learns every update ...
    assert torch.equal(flat(step.critic.embedding), first)  # ... what the critics read does not
    step(batch(rng))
    period_end = flat(step.sale.encoder)
    step.after_update(PERIOD)
    assert torch.equal(flat(step.critic.embedding), period_end)
    assert torch.equal(flat(step.actor.encoder.embedding), flat(step.sale.encoder.state))
    assert torch.equal(flat(step.critic_target.embedding), first)  # the targets: the period before's
    critic_without_embedding = [p for n, p in step.critic.named_parameters() if not n.startswith("embedding.")]
    target_without_embedding = [p for n, p in step.critic_target.named_parameters() if not n.startswith("embedding.")]
    assert all(torch.equal(a, b) for a, b in zip(critic_without_embedding, target_without_embedding, strict=True))
    if step.actor_target is not None:
        assert torch.equal(flat(step.actor_target.mean), flat(step.actor.mean))
    assert all(p.grad is None for p in step.critic.embedding.parameters())


def test_the_next_q_value_is_clipped_to_the_targets_seen_up_to_the_last_period():
    step, rng = sale_step("td3"), np.random.default_rng(1)
    data = batch(rng)
    obs, action, next_obs = data["obs"][0], data["action"][0], data["next_obs"][0]
    returns, discount = data["return"][0], data["discount"][0]
    zero = twin_critic_loss(step.critic, step.critic_target, obs, action, returns, discount, next_obs, action, 0.0,
                            None, torch.zeros(2))
    assert torch.allclose(zero.target, returns)  # the first period: [0, 0], the target is the return alone
    bounds = torch.tensor([5.0, 6.0])
    clipped = twin_critic_loss(step.critic, step.critic_target, obs, action, returns, discount, next_obs, action, 0.0,
                               None, bounds)
    assert torch.allclose(clipped.target, returns + discount * 5.0)  # small Q-values of a fresh critic, raised to 5
    seen = []
    for update in range(1, PERIOD + 1):
        step(data)
        seen.append(step.sale.targets_seen.clone())
        step.after_update(update)
    assert torch.equal(step.sale.next_q_bounds, seen[-1]) and seen[-1][0] < seen[-1][1]
    first = step.sale.next_q_bounds.clone()
    # a period of zero returns: every target, 0.99 * a clamped Q-value, lies inside the bounds;
    # TD7's bounds keep every target seen before (bounds of that period alone would shrink)
    quiet = {**data, "return": torch.zeros_like(data["return"])}
    for update in range(PERIOD + 1, 2 * PERIOD + 1):
        step(quiet)
        step.after_update(update)
    assert torch.equal(step.sale.next_q_bounds, first)


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_collectors_acting_graph_and_policy_pt2_act_as_the_learners_actor(algo, tmp_path):
    step, rng = sale_step(algo), np.random.default_rng(2)
    for update in range(1, 2 * PERIOD + 1):
        step(batch(rng))
        step.after_update(update)
    obs = rng.normal(size=(6, OBS)).astype(np.float32) * 3
    actor = step.actor.eval()
    with torch.no_grad():
        ours = actor(torch.from_numpy(obs)).numpy()
    acting = ActorPolicy(algo == "sac", ACTIONS, 0.0, np.random.default_rng(0))
    graph = export_acting_graph(algorithm(algo), actor, (OBS,), "float32")
    acting.load(Weights(1, export_arrays(actor), acting_graph=graph))
    assert np.allclose(acting.act(obs, None, 0, explore=False)[0], ours, atol=1e-5)
    module, outputs = step.exportable(actor)
    path = tmp_path / "policy.pt2"
    path.write_bytes(export_policy_archive(module, (OBS,), outputs))
    policy = load_policy(path)
    assert isinstance(policy, ExportedPolicy)
    low, high = np.array([-1.0] * ACTIONS), np.array([2.0] * ACTIONS)
    assert np.allclose(policy.act(obs), (low + high) / 2 + (high - low) / 2 * ours, atol=1e-5)


def test_a_checkpoint_restores_the_encoder_its_optimizer_and_the_clipping_bounds():
    step, rng = sale_step("td3"), np.random.default_rng(3)
    for update in range(1, PERIOD + 2):
        step(batch(rng))
        step.after_update(update)
    again = sale_step("td3")
    again.load_state_dict(step.state_dict())
    assert torch.equal(flat(again.sale.encoder), flat(step.sale.encoder))
    assert torch.equal(again.sale.next_q_bounds, step.sale.next_q_bounds) and torch.equal(again.sale.targets_seen, step.sale.targets_seen)
    assert torch.equal(flat(again.critic_target.embedding), flat(step.critic_target.embedding))
    data = batch(rng)
    for one in (step, again):
        one.generator.manual_seed(7)
        one(data)
    assert torch.equal(flat(again.sale.encoder), flat(step.sale.encoder)) and torch.equal(flat(again.critic), flat(step.critic))

