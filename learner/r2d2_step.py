"""R2D2's update (Kapturowski et al., ICLR 2019): a recurrent Q-network trained on replayed
sequences from the recurrent state stored with each, after a burn-in.

A batch holds G micro-batches of B sequences, each field [G, B, T, ...] (replay/sequences.py
serves them: obs, action, reward, discount, first, and `state`, the stored (h, c) side by side),
with importance weights [G, B] under prioritized replay. For each micro-batch the online network
is unrolled over the sequence from its stored state, the first `burn_in` steps without gradient,
and the target network likewise; the loss is half the squared n-step double-Q TD error
(learner/r2d2_targets.py) averaged over each sequence's steps, weighted per sequence; each
sequence's new priority mixes the max and the mean of its |TD errors|. An autoreset's pad steps
count in neither (r2d2_targets.loss_mask). The target network is
copied every `target_update_every` updates (or moved by Polyak averaging).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping

import torch
from torch import nn

from raypex.learner.algorithm import take_means
from raypex.learner.encoders import encoder_from
from raypex.learner.gradient_group import GradientGroup, weighed
from raypex.learner.host_adam import adam_for, load_optimizer
from raypex.learner.policy_file import RECURRENT
from raypex.learner.precision import PrecisionPolicy, make_precision
from raypex.learner.r2d2_targets import loss_mask, sequence_priorities, td_errors, unroll
from raypex.learner.recurrent_networks import RecurrentQNetwork, StatefulQ
from raypex.learner.settings import LearnerSettings
from raypex.learner.target_rules import target_rule
from raypex.replay.contracts import each_part, indexed, nested


class R2D2Step:
    """The online and target recurrent Q-networks, Adam, and one update over sequences."""

    kind = "r2d2"
    policy_key = "online"  # state_dict()'s entry for `policy`
    compiled = False

    def __init__(self, settings: LearnerSettings, device: torch.device,
                 gather: Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]] | None = None,
                 precision: PrecisionPolicy | None = None):
        self.s, self.gather, self.device = settings, gather, device
        self.precision = precision or make_precision("fp32", device)
        self.online = RecurrentQNetwork(tuple(settings.obs_shape), settings.num_actions, settings.hidden,
                                        settings.recurrent_size, settings.dueling, settings.core,
                                        settings.obs_dtype, encoder_from(settings)).to(device)
        self.target = copy.deepcopy(self.online).requires_grad_(False)
        self.policy: nn.Module = self.online
        self.params = list(self.online.parameters())
        self.targets = target_rule(settings.target_update, [(self.target, self.online)], settings.target_tau,
                                   settings.target_update_every)
        self.optimizer = adam_for(self.params, settings.lr, settings.adam_eps, device)
        self.loss_sum = torch.zeros((), device=device)
        self.q_sum = torch.zeros((), device=device)
        self.td_abs: torch.Tensor | None = None  # prioritized replay: each sequence's priority mix, [G, B]
        self.gradients: GradientGroup | None = None  # several learners (learner/gradient_group.py)

    def __call__(self, batch: Mapping[str, torch.Tensor]) -> None:
        """One eager update (see the module docstring)."""
        if self.gather is not None:
            batch = self.gather(batch)
        batch = nested(batch)
        groups = batch["action"].shape[0]
        if self.s.prioritized and (self.td_abs is None or self.td_abs.shape != batch["action"].shape[:2]):
            self.td_abs = torch.zeros(batch["action"].shape[:2], device=batch["action"].device)  # as DQNStep's
        empty = batch["action"].shape[1] == 0  # a learner of a group with no part: its gradients count as zeros
        for g in range(0 if empty else groups):
            loss, td, mask = self.sequence_loss({name: indexed(batch[name], g) for name in batch})
            weighed(loss / groups, self.gradients).backward()
            if self.td_abs is not None:
                self.td_abs[g].copy_(sequence_priorities(td.detach().abs(), mask))
        if self.gradients is not None:
            self.gradients.reduce(self.params)
        nn.utils.clip_grad_norm_(self.params, self.s.max_grad_norm, foreach=True)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.targets.after_step()

    def sequence_loss(self, sequences: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(the weighted loss, the TD errors [L - 1, B], which of them count [L - 1, B]) of one
        micro-batch of B sequences."""
        time_first = {name: each_part(lambda steps: steps.transpose(0, 1), sequences[name])
                      for name in ("obs", "action", "reward", "discount", "first")}
        batch = time_first["action"].shape[1]
        h, c = sequences["state"].float().split(self.s.recurrent_size, dim=-1)
        initial = self.online.initial_state(batch, h.device)
        burn_in = self.s.burn_in
        q_online = unroll(self.online, time_first["obs"], time_first["first"].bool(), (h, c), initial, burn_in)
        with torch.no_grad():
            q_target = unroll(self.target, time_first["obs"], time_first["first"].bool(), (h, c), initial, burn_in)
        td = td_errors(q_online, q_target, time_first["action"][burn_in:], time_first["reward"][burn_in:],
                       time_first["discount"][burn_in:], self.s.n_step, self.s.value_rescale)
        mask = loss_mask(time_first["first"], burn_in)
        kept = mask.to(td.dtype)
        per_sequence = 0.5 * (td.square() * kept).sum(dim=0) / kept.sum(dim=0).clamp(min=1.0)
        if self.s.prioritized:
            per_sequence = per_sequence * sequences["weight"]
        loss = per_sequence.mean()
        self.loss_sum += loss.detach()
        self.q_sum += q_online.detach().max(dim=-1).values.mean()
        return loss, td, mask

    def after_update(self, updates: int) -> None:
        """A hard target copy when one is due (learner/target_rules.py)."""
        self.targets.after_update(updates)

    def capture(self, example: Mapping[str, torch.Tensor]):
        """Not captured yet: the unroll's Python loop would be one graph per sequence length."""
        raise NotImplementedError("r2d2's update is not captured as a CUDA graph yet; use learner.cuda_graphs off")

    def warm_up(self, example: Mapping[str, torch.Tensor]) -> None:
        """Nothing: an eager update needs no warm-up."""

    def exportable(self, policy: nn.Module) -> tuple[nn.Module, str]:
        """`policy` (a CPU copy of `self.policy`) as policy.pt2 holds it: (obs, state) -> (Q-values, state)."""
        return StatefulQ(policy), RECURRENT

    def training_tensors(self) -> list[torch.Tensor]:
        """Every tensor an update changes, optimizer state aside."""
        return [*self.params, *self.targets.targets, self.loss_sum, self.q_sum]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers an update steps."""
        return [self.optimizer]

    def take_metrics(self, micro_batches: int) -> dict[str, float]:
        """Mean loss and greedy Q over the `micro_batches` since the last call; resets the sums."""
        return take_means({"td_loss": self.loss_sum, "q_values": self.q_sum}, micro_batches)

    def state_dict(self) -> dict:
        """The networks and the optimizer."""
        return {"online": self.online.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict` output."""
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        load_optimizer(self.optimizer, state["optimizer"], self.s.lr, self.s.adam_eps)
