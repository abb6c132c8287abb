"""The networks of TD3 and SAC: an actor (deterministic, or SAC's squashed Gaussian) and twin
critics Q1(s, a), Q2(s, a). Actions are in [-1, 1] (actors/action_scaling.py maps them to the
env's units).

Flat observations go straight into MLPs. Images [C, H, W] first go through an `ImageEncoder` (the
DQN CNNs' convolutions, learner/networks.py, chosen by image size, then a normalized projection to
IMAGE_FEATURES): the actor has its own, trained
by the actor's loss, and the twin critics share one, trained by the critics' loss (the actor's loss
does not move it). A user's encoder (network.encoder, learner/encoders.py) takes the
ImageEncoder's place, on any observations, one for the actor and one the critics share. Flat observations can be normalized first (`network.obs_norm`: a
RunningObsNorm in the encoder's place, learner/obs_norm.py). Collectors and the evaluator act
with `ActorOutputs`, exported as the acting graph (learner/acting_graph.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from raypex.learner.batch_renorm import BatchRenorm
from raypex.learner.categorical_critic import HLGaussSupport, head_outputs, head_q
from raypex.learner.networks import conv_output_width, image_convs, scaled_input
from raypex.learner.obs_norm import RunningObsNorm
from raypex.learner.precision import fp32_head
from raypex.learner.sale import SaleActorInput

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # SAC's log standard deviation, squashed into this range


def squashed_log_std(raw: torch.Tensor) -> torch.Tensor:
    """The log std head's raw output mapped smoothly into [LOG_STD_MIN, LOG_STD_MAX]."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (raw.tanh() + 1.0)


def _torso(width: int, hidden: list[int], renorm: bool = False, layer_norm: bool = False) -> tuple[nn.Sequential, int]:
    """Linear and ReLU per hidden layer; with `renorm` (CrossQ's critics) batch renormalization of
    the input and of each hidden layer's output; with `layer_norm` (BRO's critics) a LayerNorm
    before each ReLU."""
    layers: list[nn.Module] = [BatchRenorm(width)] if renorm else []
    for size in hidden:
        layers += [nn.Linear(width, size), *([nn.LayerNorm(size)] if layer_norm else []), nn.ReLU(),
                   *([BatchRenorm(size)] if renorm else [])]
        width = size
    return nn.Sequential(*layers), width


IMAGE_FEATURES = 50  # the width images are projected to before the MLPs


class ImageEncoder(nn.Module):
    """Images [B, C, H, W] -> features [B, IMAGE_FEATURES]: the convolutions, then a linear
    projection, LayerNorm and tanh. uint8 is scaled to [0, 1] on the network's device (what
    crosses processes stays a quarter of float32's bytes), float images are taken as they are.

    Why the normalized projection: the convolutions' ReLU features are never negative, and Adam
    moves every weight of the next layer by about the learning rate per step, so a few steps of
    one sign in the actor's gradient shifted a hidden unit's input for every picture at once. In
    PixelReach runs that killed the actor's hidden ReLUs (all 64 dead in a stuck run: a constant
    action for every picture, and nothing left to train them back), whereas features in [-1, 1]
    of both signs do not move together."""

    def __init__(self, obs_shape: tuple[int, ...], obs_dtype: str):
        super().__init__()
        self.input_scale = 1.0 / 255.0 if obs_dtype == "uint8" else 1.0
        self.convs = image_convs(obs_shape)
        self.projection = nn.Linear(conv_output_width(self.convs, obs_shape), IMAGE_FEATURES)
        self.norm = nn.LayerNorm(IMAGE_FEATURES)
        self.width = IMAGE_FEATURES

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.convs(scaled_input(obs, self.convs[0].weight.dtype, self.input_scale))
        return torch.tanh(self.norm(self.projection(features)))


def _encoder_for(obs_shape: tuple[int, ...], obs_dtype: str, obs_norm: bool,
                 user: Callable[[], nn.Module] | None = None) -> tuple[nn.Module | None, int]:
    """What observations go through first, and the width it gives: a fresh one of the user's
    encoder when `user` builds one (network.encoder, learner/encoders.py); an ImageEncoder for
    images; for flat observations a RunningObsNorm with `obs_norm`, else nothing."""
    if user is not None:
        encoder = user()
        return encoder, encoder.width
    if len(obs_shape) == 1:
        return (RunningObsNorm(obs_shape[0]) if obs_norm else None), obs_shape[0]
    if obs_norm:
        raise ValueError("obs_norm is for flat observations; images are scaled by their encoder")
    encoder = ImageEncoder(obs_shape, obs_dtype)
    return encoder, encoder.width


class ActorNetwork(nn.Module):
    """obs [B, *obs_shape] -> tanh(mean) [B, action_dim]; with `gaussian`, also a log-std head for
    SAC's `sample`; with `obs_norm`, flat observations are normalized first (learner/obs_norm.py);
    with `sale`, they go in beside their SALE embedding (learner/sale.py)."""

    def __init__(self, obs_shape: tuple[int, ...], action_dim: int, hidden: list[int], gaussian: bool,
                 obs_dtype: str = "float32", obs_norm: bool = False, sale: bool = False,
                 encoder: Callable[[], nn.Module] | None = None):
        super().__init__()
        if sale:  # learner/sale.py: the flat observation projected, beside its frozen embedding
            self.encoder: nn.Module | None = SaleActorInput(obs_shape[0], hidden[0])
            width = self.encoder.width
        else:
            self.encoder, width = _encoder_for(tuple(obs_shape), obs_dtype, obs_norm, encoder)
        self.torso, width = _torso(width, hidden)
        self.mean = nn.Linear(width, action_dim)
        self.log_std = nn.Linear(width, action_dim) if gaussian else None

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        if self.encoder is not None:
            obs = self.encoder(obs)
        return self.torso(obs.to(self.mean.weight.dtype))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(fp32_head(self.mean, self._features(obs)))

    def mean_and_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The pre-tanh mean and, for a Gaussian actor, the squashed log std (None otherwise)."""
        features = self._features(obs)
        mean = fp32_head(self.mean, features)
        return mean, None if self.log_std is None else squashed_log_std(fp32_head(self.log_std, features))

    def sample(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(tanh(mean + std * noise), its log-probability [B]) for standard normal `noise`; the
        log-probability includes the tanh's change of variables."""
        mean, log_std = self.mean_and_log_std(obs)
        pre_tanh = mean + log_std.exp() * noise
        gaussian_log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(dim=1)
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable where tanh saturates
        squash = (2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))).sum(dim=1)
        return torch.tanh(pre_tanh), gaussian_log_prob - squash


class TwinCritic(nn.Module):
    """Two independent MLPs of (obs, action) -> Q (for images, of the features of one encoder they
    share); forward returns both [B] Q-values. With `batch_renorm`, CrossQ's critics
    (learner/batch_renorm.py): their output depends on the batch in training mode; with
    `layer_norm`, a LayerNorm before each hidden ReLU. With a `support` (network.critic_head
    categorical, learner/categorical_critic.py) each head gives logits over it (`logits`) and its
    Q is their distribution's mean."""

    def __init__(self, obs_shape: tuple[int, ...], action_dim: int, hidden: list[int], obs_dtype: str = "float32",
                 obs_norm: bool = False, batch_renorm: bool = False, encoder: Callable[[], nn.Module] | None = None,
                 layer_norm: bool = False, support: HLGaussSupport | None = None):
        super().__init__()
        self.encoder, width = _encoder_for(tuple(obs_shape), obs_dtype, obs_norm, encoder)
        self.q1_torso, out_width = _torso(width + action_dim, hidden, batch_renorm, layer_norm)
        self.q2_torso, _ = _torso(width + action_dim, hidden, batch_renorm, layer_norm)
        self.support = support
        self.q1_out = nn.Linear(out_width, head_outputs(support))
        self.q2_out = nn.Linear(out_width, head_outputs(support))

    def logits(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each head's output: [B, bins] logits over the support, or [B, 1] Q-values without one."""
        if self.encoder is not None:
            obs = self.encoder(obs)
        x = torch.cat([obs.to(self.q1_out.weight.dtype), action.to(self.q1_out.weight.dtype)], dim=1)
        return fp32_head(self.q1_out, self.q1_torso(x)), fp32_head(self.q2_out, self.q2_torso(x))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out1, out2 = self.logits(obs, action)
        return head_q(self.support, out1), head_q(self.support, out2)


class ActionsInEnvUnits(nn.Module):
    """The deterministic actor with its [-1, 1] output mapped to the env's [low, high]: what
    policy.pt2 holds for TD3 and SAC."""

    def __init__(self, actor: ActorNetwork, low: tuple[float, ...], high: tuple[float, ...]):
        super().__init__()
        self.actor = actor
        low_t, high_t = torch.tensor(low, dtype=torch.float32), torch.tensor(high, dtype=torch.float32)
        self.register_buffer("center", (high_t + low_t) / 2)
        self.register_buffer("half_range", (high_t - low_t) / 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.center + self.half_range * self.actor(obs)


class ActorOutputs(nn.Module):
    """What collectors and the evaluator run of an actor: its deterministic action tanh(mean) and,
    for SAC's Gaussian actor, the mean and squashed log std its exploring sample is drawn around
    (tanh(mean + exp(log_std) * noise), as `ActorNetwork.sample`)."""

    def __init__(self, actor: ActorNetwork):
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mean, log_std = self.actor.mean_and_log_std(obs)
        return (torch.tanh(mean),) if log_std is None else (torch.tanh(mean), mean, log_std)
