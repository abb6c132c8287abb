"""SALE (Fujimoto et al. 2023, the representation of TD7): learned embeddings of the state,
zs = f(s), and of the state-action pair, zsa = g(zs, a), trained so that zsa predicts the next
state's zs. The actor reads [AvgL1Norm(W s), zs] and each critic [AvgL1Norm(W (s, a)), zsa, zs]
(`network.sale`, td3 and sac on flat observations).

Why: on HalfCheetah-v5, TD3 with it reached 8,721-9,830 at 100k env steps (three seeds) where SAC
without it had 3,918 (BENCHMARKS.md (git history), "Three seeds of the SALE config"): the critics no longer
learn the dynamics from the TD error alone.

What the actor and critics read is a frozen copy of the trained encoder ("fixed" in the paper),
refreshed with the hard target copies every target period, and the targets read the copy of the
period before, so a critic's inputs move in steps rather than with every update
(SaleTraining.after_target_copy). The frozen copies live inside the actor and critic modules, so
the published actor weights carry their embedding (the acting graph runs it, learner/acting_graph.py) and so does
policy.pt2.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from raypex.learner.categorical_critic import HLGaussSupport, head_outputs, head_q
from raypex.learner.gradient_group import GradientGroup
from raypex.learner.host_adam import adam_for, load_optimizer
from raypex.learner.precision import fp32_head

AVG_L1_EPS = 1e-8  # AvgL1Norm divides by at least this
EMBEDDING_WIDTH = 256  # zs and zsa, as TD7
ENCODER_HIDDEN = 256


def avg_l1_norm(x: torch.Tensor) -> torch.Tensor:
    """x divided by its mean absolute value over the last dimension (TD7's AvgL1Norm), in fp32."""
    x = x.float()
    return x / x.abs().mean(-1, keepdim=True).clamp(min=AVG_L1_EPS)


def _elu_mlp(width: int, hidden: list[int], out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ELU()]
        width = size
    return nn.Sequential(*layers, nn.Linear(width, out))


class StateEmbedding(nn.Module):
    """f: obs [B, obs_dim] -> zs [B, EMBEDDING_WIDTH], AvgL1Norm-ed."""

    def __init__(self, obs_dim: int):
        super().__init__()
        self.layers = _elu_mlp(obs_dim, [ENCODER_HIDDEN, ENCODER_HIDDEN], EMBEDDING_WIDTH)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return avg_l1_norm(self.layers(obs.float()))  # float64 observations (MuJoCo's) are not autocast


class SaleEncoder(nn.Module):
    """f and g, and the loss that trains them: |g(f(s), a) - f(s')|^2 with f(s') held fixed."""

    def __init__(self, obs_dim: int, action_dim: int):
        super().__init__()
        self.state = StateEmbedding(obs_dim)
        self.state_action = _elu_mlp(EMBEDDING_WIDTH + action_dim, [ENCODER_HIDDEN, ENCODER_HIDDEN], EMBEDDING_WIDTH)

    def embed(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(zs, zsa), both fp32."""
        zs = self.state(obs)
        return zs, self.state_action(torch.cat([zs, action.float()], 1)).float()

    def loss(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """The mean squared error of the predicted next-state embedding."""
        with torch.no_grad():
            target = self.state(next_obs)
        return F.mse_loss(self.embed(obs, action)[1], target)


class SaleActorInput(nn.Module):
    """The actor's input: [AvgL1Norm(W obs), zs], zs from its frozen copy of f."""

    def __init__(self, obs_dim: int, width: int):
        super().__init__()
        self.project = nn.Linear(obs_dim, width)
        self.embedding = StateEmbedding(obs_dim).requires_grad_(False)
        self.width = width + EMBEDDING_WIDTH

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.cat([avg_l1_norm(self.project(obs.float())), self.embedding(obs)], 1)


class SaleTwinCritic(nn.Module):
    """Twin critics on [AvgL1Norm(W (s, a)), zsa, zs]: a projection of `hidden[0]` units each,
    then ELU layers of `hidden`; forward returns both [B] Q-values, as TwinCritic's. With a
    `support` (network.critic_head categorical, learner/categorical_critic.py) each head gives
    logits over it (`logits`) and its Q is their distribution's mean."""

    encoder = None  # TwinCritic's image encoder or observation normalizer: none here

    def __init__(self, obs_dim: int, action_dim: int, hidden: list[int], support: HLGaussSupport | None = None):
        super().__init__()
        self.embedding = SaleEncoder(obs_dim, action_dim).requires_grad_(False)
        width = hidden[0] + 2 * EMBEDDING_WIDTH
        self.q1_project, self.q2_project = (nn.Linear(obs_dim + action_dim, hidden[0]) for _ in range(2))
        self.q1_torso, self.q2_torso = (_elu_mlp(width, hidden[:-1], hidden[-1]) for _ in range(2))
        self.support = support
        self.q1_out, self.q2_out = (nn.Linear(hidden[-1], head_outputs(support)) for _ in range(2))

    def logits(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each head's output: [B, bins] logits over the support, or [B, 1] Q-values without one."""
        zs, zsa = self.embedding.embed(obs, action)
        pair = torch.cat([obs.float(), action.float()], 1)
        return tuple(fp32_head(out, F.elu(torso(torch.cat([avg_l1_norm(project(pair)), zsa, zs], 1))))
                     for project, torso, out in ((self.q1_project, self.q1_torso, self.q1_out),
                                                 (self.q2_project, self.q2_torso, self.q2_out)))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out1, out2 = self.logits(obs, action)
        return head_q(self.support, out1), head_q(self.support, out2)


class SaleTraining:
    """SALE's part of an actor-critic update (learner/actor_critic_step.py composes it): the encoder
    and its optimizer, trained on each micro-batch before the critics' loss (its gradient loss-scaled,
    unscaled and summed over learners with theirs, not clipped); the frozen copies the actor and critics
    read, refreshed at each whole target copy (`after_target_copy`); and TD7's value clipping, the
    next Q-value clamped into the [min, max] of every target seen up to the last copy (at first
    [0, 0]), which bounds what the embeddings extrapolate."""

    def __init__(self, obs_dim: int, action_dim: int, lr: float, adam_eps: float, device: torch.device):
        self.lr, self.adam_eps = lr, adam_eps
        self.encoder = SaleEncoder(obs_dim, action_dim).to(device)
        self.params = list(self.encoder.parameters())
        self.optimizer = adam_for(self.params, lr, adam_eps, device)
        self.next_q_bounds = torch.zeros(2, device=device)
        self.targets_seen = torch.tensor([float("inf"), float("-inf")], device=device)
        self.loss_sum = torch.zeros((), device=device)
        self.actor: nn.Module | None = None
        self.critic: SaleTwinCritic | None = None
        self.group: GradientGroup | None = None  # a learner of a group (learner/gradient_group.py)

    def read_by(self, actor: nn.Module, critic: SaleTwinCritic) -> None:
        """The actor and critics whose frozen embeddings follow this encoder; theirs := its now."""
        self.actor, self.critic = actor, critic
        self.refresh_embeddings()

    def loss(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """The encoder's loss on one micro-batch (added to the sum `take_metrics` reports)."""
        loss = self.encoder.loss(obs, action, next_obs)
        self.loss_sum += loss.detach()
        return loss

    def saw_targets(self, target: torch.Tensor) -> None:
        """Widen the range of targets seen by one micro-batch's (on the device)."""
        self.targets_seen.copy_(torch.stack([torch.minimum(self.targets_seen[0], target.min()),
                                             torch.maximum(self.targets_seen[1], target.max())]))

    def after_critic_losses(self) -> None:
        """In a group of learners: the range of targets seen widened by every learner's, each
        update, so that every learner holds the group's (what a checkpoint keeps)."""
        if self.group is not None:
            with torch.no_grad():
                self.group.bounds_(self.targets_seen)

    def step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def refresh_embeddings(self) -> None:
        """The actor's and critics' frozen embeddings := the encoder's."""
        with torch.no_grad():
            torch._foreach_copy_(list(self.actor.encoder.embedding.parameters()), list(self.encoder.state.parameters()))
            torch._foreach_copy_(list(self.critic.embedding.parameters()), list(self.encoder.parameters()))

    def after_target_copy(self) -> None:
        """After the targets were copied whole: fresh embeddings (the targets keep the period
        before's) and the bounds widened to every target seen so far."""
        self.refresh_embeddings()
        with torch.no_grad():
            self.next_q_bounds.copy_(self.targets_seen)

    def take_loss(self, micro_batches: int) -> float:
        """The encoder's mean loss over the `micro_batches` since the last call; resets the sum."""
        mean = float(self.loss_sum) / micro_batches
        self.loss_sum.zero_()
        return mean

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor an update changes here, optimizer state aside."""
        return [*self.params, *self.encoder.buffers(), self.next_q_bounds, self.targets_seen, self.loss_sum]

    def state_dict(self) -> dict:
        return {"encoder": self.encoder.state_dict(), "optimizer": self.optimizer.state_dict(),
                "next_q_bounds": self.next_q_bounds.clone(), "targets_seen": self.targets_seen.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.encoder.load_state_dict(state["encoder"])
        load_optimizer(self.optimizer, state["optimizer"], self.lr, self.adam_eps)
        with torch.no_grad():
            self.next_q_bounds.copy_(state["next_q_bounds"])
            self.targets_seen.copy_(state["targets_seen"])
