"""R2D2's update on sequences (learner/r2d2_step.py): on a task that needs memory (reward for
repeating the symbol seen one step before), the recurrent network trained from stored states
learns what a feed-forward Q-network cannot, and each sequence gets its priority."""

import numpy as np
import torch

from raypex.learner.r2d2_step import R2D2Step
from raypex.learner.r2d2_targets import sequence_priorities
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
    loss, _, _ = step.sequence_loss({name: value[0] for name, value in batch.items()})
    loss.backward()
    grad = batch["obs"].grad[0]  # [B, T, 2]
    assert torch.count_nonzero(grad[:, :BURN_IN]) == 0 and torch.count_nonzero(grad[:, BURN_IN:]) > 0


def test_an_autoresets_pad_step_neither_trains_nor_sets_a_priority():
    """The step before an episode's first is an autoreset's pad step (actors/sequence_adder.py): its
    action was never taken, so changing it changes neither the loss, nor its gradient, nor the
    sequence's priority, where changing a real step's action changes all of them."""
    s = settings(obs_shape=(2,), num_actions=2, hidden=[8], algo="r2d2", recurrent_size=8, burn_in=BURN_IN,
                 n_step=2, micro_batch=4, prioritized=True)
    torch.manual_seed(0)
    step = R2D2Step(s, torch.device("cpu"))
    batch = repeat_previous(np.random.default_rng(0), 4, s.recurrent_size)
    pad = 5  # step 5 pads the episode that ends at step 4; step 6 starts the next one
    batch["first"][0, :, pad + 1] = True
    batch["reward"][0, :, pad] = 0.0

    def outcome(actions_at: int) -> tuple[float, torch.Tensor, torch.Tensor]:
        changed = {name: value.clone() for name, value in batch.items()}
        changed["action"][0, :, actions_at] = 1 - changed["action"][0, :, actions_at]
        step.optimizer.zero_grad(set_to_none=True)
        loss, td, mask = step.sequence_loss({name: value[0] for name, value in changed.items()})
        loss.backward()
        priority = sequence_priorities(td.detach().abs(), mask)
        return float(loss), torch.cat([p.grad.flatten() for p in step.params]), priority

    loss, grad, priority = outcome(actions_at=0)  # step 0 is burn-in: as the batch itself
    pad_loss, pad_grad, pad_priority = outcome(actions_at=pad)
    assert pad_loss == loss and torch.equal(pad_grad, grad) and torch.equal(pad_priority, priority)
    real_loss, real_grad, real_priority = outcome(actions_at=pad - 1)
    assert real_loss != loss and not torch.equal(real_grad, grad) and not torch.equal(real_priority, priority)
