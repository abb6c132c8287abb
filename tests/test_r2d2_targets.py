"""R2D2's targets, priorities and burn-in against hand-computed tables (learner/r2d2_targets.py)."""

import torch

from raypex.learner.r2d2_targets import (
    inverse_value_rescale,
    n_step_targets,
    sequence_priorities,
    td_errors,
    unroll,
    value_rescale,
)


def column(*values: float) -> torch.Tensor:
    """[L, 1]: one sequence's values over time."""
    return torch.tensor(values, dtype=torch.float64).unsqueeze(1)


def test_value_rescaling_and_its_inverse():
    x = torch.tensor([0.0, 3.0, -8.0], dtype=torch.float64)
    torch.testing.assert_close(value_rescale(x), torch.tensor([0.0, 1.003, -2.008], dtype=torch.float64))
    wide = torch.linspace(-1e4, 1e4, 101, dtype=torch.float64)
    torch.testing.assert_close(inverse_value_rescale(value_rescale(wide)), wide)


def test_n_step_targets_stop_at_an_episode_end_and_shorten_at_the_sequence_end():
    # gamma 0.5; the episode ends after step 1 (its discount 0), a new one starts at step 2
    rewards, discounts = column(1, 2, 3, 4, 5), column(0.5, 0.0, 0.5, 0.5, 0.5)
    values = column(10, 20, 30, 40, 50)
    # t0: 1 + .5*2 + .5*0*30 = 2 | t1: 2 + 0*3 + 0 = 2 | t2: 3 + .5*4 + .25*50 = 17.5
    # t3: the window's end is one step away: 4 + .5*50 = 29 | t4: bootstrap only
    torch.testing.assert_close(n_step_targets(rewards, discounts, values, n=2), column(2, 2, 17.5, 29))
    # n = 1: plain one-step targets
    torch.testing.assert_close(n_step_targets(rewards, discounts, values, n=1), column(11, 2, 23, 29))


def test_td_errors_bootstrap_from_the_target_network_at_the_online_networks_action():
    q_online = torch.tensor([[[1.0, 2.0]], [[3.0, 0.0]], [[0.0, 5.0]]], requires_grad=True)
    q_target = torch.tensor([[[10.0, 20.0]], [[30.0, 40.0]], [[50.0, 60.0]]])
    actions, rewards, discounts = torch.tensor([[0], [1], [0]]), torch.ones(3, 1), torch.full((3, 1), 0.9)
    # argmax online: 1, 0, 1 -> V = 20, 30, 60; targets 1 + .9*30 = 28 and 1 + .9*60 = 55; taken Q 1 and 0
    td = td_errors(q_online, q_target, actions, rewards, discounts, n=1, rescale=False)
    torch.testing.assert_close(td, torch.tensor([[27.0], [55.0]]))
    td.sum().backward()  # the gradient reaches the taken actions' Q only, not the target
    torch.testing.assert_close(q_online.grad, torch.tensor([[[-1.0, 0.0]], [[0.0, -1.0]], [[0.0, 0.0]]]))
    rescaled = td_errors(q_online, q_target, actions, rewards, discounts, n=1, rescale=True)
    expected = value_rescale(1 + 0.9 * inverse_value_rescale(torch.tensor([30.0, 60.0])))
    torch.testing.assert_close(rescaled.detach().squeeze(1), expected - torch.tensor([1.0, 0.0]))


def test_a_sequences_priority_mixes_the_max_and_mean_of_its_kept_steps():
    td_abs = torch.tensor([[1.0, 4.0, 7.0], [3.0, 1.0, 7.0], [2.0, 100.0, 7.0]])  # [steps, B]
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 0, 0]])
    # 0.9*3 + 0.1*2 = 2.9 | the 100 is not kept: 0.9*4 + 0.1*2.5 = 3.85 | nothing kept: 0
    torch.testing.assert_close(sequence_priorities(td_abs, mask), torch.tensor([2.9, 3.85, 0.0]))


def test_burn_in_moves_the_state_and_no_gradient_reaches_its_steps():
    weight = torch.tensor(2.0, requires_grad=True)

    def core(obs, state):  # the state sums what it saw; Q reads it
        (total,) = state
        total = total + obs
        return weight * total, (total,)

    obs = torch.tensor([[[1.0]], [[2.0]], [[3.0]], [[4.0]], [[5.0]]], requires_grad=True)  # [T=5, B=1, 1]
    first = torch.tensor([[False], [False], [False], [False], [True]])  # an episode starts at step 4
    stored, initial = (torch.tensor([[10.0]]),), (torch.tensor([[0.0]]),)
    q = unroll(core, obs, first, stored, initial, burn_in=2)
    # burn-in: 10 + 1 + 2 = 13; then 16 and 20; step 4 starts from the initial state: 5
    torch.testing.assert_close(q.squeeze(), 2.0 * torch.tensor([16.0, 20.0, 5.0]))
    q.sum().backward()
    torch.testing.assert_close(obs.grad.squeeze(), torch.tensor([0.0, 0.0, 4.0, 2.0, 2.0]))
    torch.testing.assert_close(weight.grad, torch.tensor(41.0))  # burn-in's states count as inputs only
