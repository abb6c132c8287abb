"""Target networks (learner/target_rules.py, learner.target_update): Polyak moves them after each
step of their networks and never copies; hard copies them whole at the period and leaves them
alone in between, for every algorithm's step alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from raypex.learner.algorithms.registry import algorithm
from raypex.learner.target_rules import PeriodicCopy, PolyakTargets, target_rule
from tests.test_learner import settings
from tests.test_sale import batch, flat


def pair() -> tuple[nn.Module, nn.Module]:
    online, target = nn.Linear(3, 2), nn.Linear(3, 2)
    with torch.no_grad():
        for p in online.parameters():
            p.fill_(1.0)
        for p in target.parameters():
            p.zero_()
    return target, online


def test_polyak_moves_by_tau_after_each_step_and_never_copies():
    target, online = pair()
    rule = target_rule("polyak", [(target, online)], tau=0.25, every=1)
    assert isinstance(rule, PolyakTargets)
    rule.after_update(1)  # no copy, whatever the count
    assert torch.equal(flat(target), torch.zeros(8))
    rule.after_step()
    rule.after_step()
    assert torch.allclose(flat(target), torch.full((8,), 1 - 0.75**2))


def test_hard_copies_whole_at_the_period_only_and_tells_its_listeners():
    target, online = pair()
    rule = target_rule("hard", [(target, online)], tau=0.25, every=3)
    assert isinstance(rule, PeriodicCopy)
    copies = []
    rule.on_copy(lambda: copies.append(flat(target)))
    for updates in (1, 2):
        rule.after_step()
        rule.after_update(updates)
    assert torch.equal(flat(target), torch.zeros(8)) and not copies
    rule.after_update(3)
    assert torch.equal(flat(target), flat(online)) and len(copies) == 1 and torch.equal(copies[0], flat(online))


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_an_actor_critic_step_with_hard_targets_copies_them_every_period(algo):
    """td3 and sac without SALE take learner.target_update hard too: their critic (and TD3's actor)
    targets stand still between copies and equal the online networks right after one."""
    s = settings(obs_shape=(5,), num_actions=0, algo=algo, action_low=(-1.0,) * 2, action_high=(1.0,) * 2,
                 hidden=[16, 16], target_update="hard", target_update_every=3, micro_batch=32, policy_delay=1)
    step = algorithm(algo).build_step(s, torch.device("cpu"))
    rng = np.random.default_rng(0)
    first = flat(step.critic_target)
    for updates in (1, 2):
        step(batch(rng))
        step.after_update(updates)
    assert torch.equal(flat(step.critic_target), first) and not torch.equal(flat(step.critic), first)
    step(batch(rng))
    step.after_update(3)
    assert torch.equal(flat(step.critic_target), flat(step.critic))
    if step.actor_target is not None:
        assert torch.equal(flat(step.actor_target), flat(step.actor))
