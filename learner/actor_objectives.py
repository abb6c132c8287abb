"""What TD3 and SAC add to the shared actor-critic update (learner/actor_critic_step.py): the
critics' target, the actor's loss, and what each owns beyond the actor and critics.

- TD3Objective: a deterministic actor with a target copy; the critics' target takes the target
  actor's action plus clipped smoothing noise; the actor follows -Q1 (td3_loss.py).
- SACObjective: a squashed-Gaussian actor and no actor target; the target takes a sampled next
  action with the entropy bonus; the actor's loss comes with the temperature's, whose log_alpha
  and optimizer this objective owns (sac_loss.py).

The step hands each one micro-batch at a time under its precision and scales, and steps the
objective's own optimizer with the actor's; `noise` is always the standard normal the step drew
for the update (a captured CUDA graph reads it from a fixed buffer).
"""

from __future__ import annotations

import torch
from torch import nn

from raypex.learner.host_adam import adam_for, load_optimizer
from raypex.learner.sac_loss import sac_actor_and_temperature_loss, sac_critic_loss
from raypex.learner.settings import LearnerSettings
from raypex.learner.td3_loss import CriticLossOutput, td3_actor_loss, td3_critic_loss


class TD3Objective:
    """TD3's target smoothing and deterministic policy gradient."""

    gaussian = False  # the actor's head
    uses_actor_target = True

    def __init__(self, settings: LearnerSettings):
        self.policy_noise, self.noise_clip = settings.policy_noise, settings.noise_clip

    def critic_loss(self, critic: nn.Module, critic_target: nn.Module | None, actor: nn.Module,
                    actor_target: nn.Module | None, transition: tuple[torch.Tensor, ...], weight: torch.Tensor | None,
                    noise: torch.Tensor, bounds: torch.Tensor | None) -> CriticLossOutput:
        """The twin critics' loss on one micro-batch (obs, action, return, discount, next_obs)."""
        obs, action, returns, discount, next_obs = transition
        return td3_critic_loss(critic, critic_target, actor_target, obs, action, returns, discount, next_obs, weight,
                               noise * self.policy_noise, self.noise_clip, bounds)

    def actor_loss(self, actor: nn.Module, critic: nn.Module, obs: torch.Tensor,
                   noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the actor's loss, None: nothing else learns with it)."""
        return td3_actor_loss(actor, critic, obs), None

    def parameters(self) -> list[torch.Tensor]:
        """What this objective trains besides the actor: nothing."""
        return []

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """Optimizers of its own, stepped with the actor's: none."""
        return []

    def metrics(self) -> dict[str, float]:
        """Figures of its own for TensorBoard: none."""
        return {}

    def state_dict(self) -> dict:
        """State of its own for checkpoints: none."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Nothing of its own to restore."""


class SACObjective:
    """SAC's soft target, reparameterized actor loss and automatic temperature."""

    gaussian = True
    uses_actor_target = False

    def __init__(self, settings: LearnerSettings, device: torch.device):
        self.lr, self.adam_eps = settings.lr, settings.adam_eps
        self.target_entropy = float(-settings.action_dim if settings.target_entropy is None else settings.target_entropy)
        self.log_alpha = torch.tensor(float(torch.tensor(settings.init_temperature).log()), device=device,
                                      requires_grad=True)
        self.optimizer = adam_for([self.log_alpha], settings.lr, settings.adam_eps, device)

    @property
    def alpha(self) -> torch.Tensor:
        """The entropy temperature (a detached scalar tensor)."""
        return self.log_alpha.detach().exp()

    def critic_loss(self, critic: nn.Module, critic_target: nn.Module | None, actor: nn.Module,
                    actor_target: nn.Module | None, transition: tuple[torch.Tensor, ...], weight: torch.Tensor | None,
                    noise: torch.Tensor, bounds: torch.Tensor | None) -> CriticLossOutput:
        """The twin critics' loss on one micro-batch (obs, action, return, discount, next_obs)."""
        obs, action, returns, discount, next_obs = transition
        return sac_critic_loss(critic, critic_target, actor, self.alpha, obs, action, returns, discount, next_obs,
                               weight, noise, bounds)

    def actor_loss(self, actor: nn.Module, critic: nn.Module, obs: torch.Tensor,
                   noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the actor's loss, the temperature's): they share no parameter, so one backward of their
        sum serves both."""
        return sac_actor_and_temperature_loss(actor, critic, self.log_alpha, obs, noise, self.target_entropy)

    def parameters(self) -> list[torch.Tensor]:
        """What this objective trains besides the actor: the log-temperature."""
        return [self.log_alpha]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The temperature's optimizer, stepped with the actor's."""
        return [self.optimizer]

    def metrics(self) -> dict[str, float]:
        """The temperature, for TensorBoard."""
        return {"temperature": float(self.alpha)}

    def state_dict(self) -> dict:
        """The temperature and its optimizer (the keys a checkpoint has always held them under)."""
        return {"log_alpha": self.log_alpha.detach().clone(), "alpha_optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore from a checkpoint's state (`state_dict`'s keys among the step's)."""
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        load_optimizer(self.optimizer, state["alpha_optimizer"], self.lr, self.adam_eps)
