"""R2D2's update on sequences (learner/r2d2_step.py): on a task that needs memory (reward for
repeating the symbol seen one step before), the recurrent network trained from stored states
learns what a feed-forward Q-network cannot, and each sequence gets its priority."""

import numpy as np
import torch

from raypex.learner.r2d2_step import R2D2Step
from tests.test_learner import settings

T, BURN_IN, B = 8, 2, 16
UPDATES = 150


def repeat_previous(rng: np.random.Generator, batch: int, recurrent_size: int) -> dict[str, torch.Tensor]:
    """[1, batch, T] sequences: a random symbol (one-hot of 2) each step, a random action, reward 1
    when the action is the symbol of the step before; discount 0 (each step's value is its reward);
    stored states are zeros, and every sequence starts an episode."""
    symbols = rng.integers(0, 2, (batch, T))
    actions = rng.integers(0, 2, (batch, T))
    previous = np.concatenate([np.full((batch, 1), -1), symbols[:, :-1]], axis=1)
    fields = {"obs": np.eye(2, dtype=np.float32)[symbols], "action": actions,
              "reward": (actions == previous).astype(np.float32), "discount": np.zeros((batch, T), np.float32),
              "first": np.zeros((batch, T), bool), "state": np.zeros((batch, 2 * recurrent_size), np.float32),
              "weight": np.ones(batch, np.float32)}
    fields["first"][:, 0] = True
    return {name: torch.from_numpy(np.asarray(value))[None] for name, value in fields.items()}


def test_the_recurrent_update_learns_what_needs_memory_and_gives_each_sequence_a_priority():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    s = settings(obs_shape=(2,), num_actions=2, hidden=[16], algo="r2d2", recurrent_size=16, burn_in=BURN_IN,
                 n_step=1, value_rescale=False, lr=1e-2, micro_batch=B, target_update_every=20, prioritized=True)
    step = R2D2Step(s, torch.device("cpu"))
    for update in range(1, UPDATES + 1):
        step(repeat_previous(rng, B, s.recurrent_size))
        step.after_update(update)
    assert step.td_abs.shape == (1, B) and (step.td_abs > 0).all()
    test = repeat_previous(np.random.default_rng(1), 256, s.recurrent_size)
    obs, first = test["obs"][0].transpose(0, 1), test["first"][0].transpose(0, 1)
    from raypex.learner.r2d2_targets import unroll

    with torch.no_grad():
        state = step.online.initial_state(256)
        q = unroll(step.online, obs, first, state, state, burn_in=0)  # [T, 256, 2]
    symbols = test["obs"][0].argmax(-1).T  # [T, 256]
    right = (q[1:].argmax(-1) == symbols[:-1]).float().mean()
    assert right > 0.95, float(right)  # a feed-forward network sees only the current symbol: about 0.5


def test_no_gradient_reaches_the_burn_in():
    s = settings(obs_shape=(2,), num_actions=2, hidden=[8], algo="r2d2", recurrent_size=8, burn_in=BURN_IN,
                 n_step=2, micro_batch=4)
    step = R2D2Step(s, torch.device("cpu"))
    batch = repeat_previous(np.random.default_rng(0), 4, s.recurrent_size)
    batch["obs"].requires_grad_(True)
    loss, _ = step.sequence_loss({name: value[0] for name, value in batch.items()})
    loss.backward()
    grad = batch["obs"].grad[0]  # [B, T, 2]
    assert torch.count_nonzero(grad[:, :BURN_IN]) == 0 and torch.count_nonzero(grad[:, BURN_IN:]) > 0
