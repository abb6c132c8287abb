"""Q-networks: an MLP for flat observations, the Nature-DQN CNN for Atari-sized images (frame stacks
of 84x84) and a small CNN for small images (MinAtar's 10x10), each with an optional dueling head.

Collectors build the same network on CPU to act; the learner builds it on its device to train.
Pixel batches arrive as uint8 and are scaled to [0, 1] inside `forward`, that is on the device the
network lives on: what crosses Ray and the host->device copy is a quarter of the float32 size.
Every uint8 observation is taken as 0..255 (images of booleans are stored as 0/255, actors/envs.py);
float images are used as they are.
"""

from __future__ import annotations

from copy import deepcopy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def relu_mlp(width: int, hidden: list[int]) -> tuple[nn.Sequential, int]:
    """Linear + ReLU layers of `hidden` sizes after an input of `width` features, and the width out."""
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    return nn.Sequential(*layers), width


class MLPQNetwork(nn.Module):
    """Maps a float32 batch of flat observations [B, obs_dim] to Q-values [B, num_actions].
    With `layer_norm`, each hidden layer's output is layer-normalized before its ReLU (PQN's
    Q-network; network.critic_norm layer_norm)."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: list[int], dueling: bool, layer_norm: bool = False):
        super().__init__()
        self.torso, width = relu_mlp(obs_dim, hidden)
        self.norms = nn.ModuleList(nn.LayerNorm(size) for size in hidden) if layer_norm else None
        self.dueling = dueling
        self.advantage = nn.Linear(width, num_actions)
        self.value = nn.Linear(width, 1) if dueling else None
        self._hidden_layers = [layer for layer in self.torso if isinstance(layer, nn.Linear)]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # F.linear on the layers' own parameters instead of calling each nn.Module: for a network
        # this small the per-module call overhead is a large share of the learner's update time.
        features = obs.to(self.advantage.weight.dtype)  # float32, or an acting copy's bf16
        for i, layer in enumerate(self._hidden_layers):
            features = F.linear(features, layer.weight, layer.bias)
            if self.norms is not None:
                norm = self.norms[i]
                features = F.layer_norm(features, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
            features = F.relu(features)
        advantage = F.linear(features, self.advantage.weight, self.advantage.bias)
        if self.value is None:
            return advantage
        value = F.linear(features, self.value.weight, self.value.bias)
        return value + advantage - advantage.mean(dim=1, keepdim=True)


class NatureCNNQNetwork(nn.Module):
    """The Nature-DQN torso (Mnih et al. 2015: 32x8x8/4, 64x4x4/2, 64x3x3/1 convolutions) and
    fully connected `hidden` layers; maps frame stacks [B, stack, H, W] (uint8 0..255 or float
    in the same range) to Q-values [B, num_actions]."""

    def __init__(self, obs_shape: tuple[int, int, int], num_actions: int, hidden: list[int], dueling: bool,
                 input_scale: float = 1.0 / 255.0, layer_norm: bool = False):
        super().__init__()
        self.input_scale = input_scale
        self.convs = nature_convs(obs_shape[0])
        width = conv_output_width(self.convs, obs_shape)
        self.head = MLPQNetwork(width, num_actions, hidden, dueling, layer_norm)
        self.channels_last = False

    def use_channels_last(self, enabled: bool) -> NatureCNNQNetwork:
        """Keep weights and activations channels-last (NHWC): what tensor-core convolutions read
        natively on a GPU. The frames are reordered while still uint8, a quarter of the bytes."""
        self.channels_last = enabled
        return self.to(memory_format=torch.channels_last if enabled else torch.contiguous_format)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            obs = obs.contiguous(memory_format=torch.channels_last)
        return self.head(self.convs(scaled_input(obs, self.convs[0].weight.dtype, self.input_scale)))


class SmallCNNQNetwork(nn.Module):
    """The MinAtar paper's torso (Young & Tian 2019: one 3x3 convolution with 16 channels, stride 1)
    and fully connected `hidden` layers (128 units there), for images too small for the Nature CNN;
    maps [B, C, H, W] to Q-values [B, num_actions]."""

    def __init__(self, obs_shape: tuple[int, int, int], num_actions: int, hidden: list[int], dueling: bool,
                 input_scale: float = 1.0 / 255.0, layer_norm: bool = False):
        super().__init__()
        self.input_scale = input_scale
        self.convs = small_convs(obs_shape[0])
        self.head = MLPQNetwork(conv_output_width(self.convs, obs_shape), num_actions, hidden, dueling, layer_norm)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.convs(scaled_input(obs, self.convs[0].weight.dtype, self.input_scale)))


class EncodedQNetwork(nn.Module):
    """A user's observation encoder (network.encoder, learner/encoders.py), then the fully connected
    `hidden` layers and (dueling) head: [B, *obs_shape] -> Q-values [B, num_actions]."""

    def __init__(self, encoder: nn.Module, num_actions: int, hidden: list[int], dueling: bool, layer_norm: bool = False):
        super().__init__()
        self.encoder = encoder
        self.head = MLPQNetwork(encoder.width, num_actions, hidden, dueling, layer_norm)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(obs))


class ConvFeatures(nn.Module):
    """An image part's features for a Q-network (learner/parts_encoder.py): the convolutions
    `image_convs` picks for its size, flattened; uint8 scaled to [0, 1]."""

    def __init__(self, obs_shape: tuple[int, int, int], obs_dtype: str):
        super().__init__()
        self.input_scale = 1.0 / 255.0 if obs_dtype == "uint8" else 1.0
        self.convs = image_convs(obs_shape)
        self.width = conv_output_width(self.convs, obs_shape)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.convs(scaled_input(obs, self.convs[0].weight.dtype, self.input_scale))


def nature_convs(channels: int) -> nn.Sequential:
    """The Nature-DQN convolutions (32x8x8/4, 64x4x4/2, 64x3x3/1), flattened."""
    return nn.Sequential(
        nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        nn.Flatten(),
    )


def small_convs(channels: int) -> nn.Sequential:
    """MinAtar's one 3x3 convolution with 16 channels, stride 1, flattened."""
    return nn.Sequential(nn.Conv2d(channels, 16, 3, stride=1), nn.ReLU(), nn.Flatten())


def conv_output_width(convs: nn.Sequential, obs_shape: tuple[int, ...]) -> int:
    """The flat feature width `convs` gives for one [C, H, W] image."""
    with torch.no_grad():
        return int(convs(torch.zeros(1, *obs_shape)).shape[1])


def image_convs(obs_shape: tuple[int, ...]) -> nn.Sequential:
    """The convolutions for images [C, H, W]: the Nature CNN's from 36x36 up, the small CNN's below."""
    if min(obs_shape[1:]) >= NATURE_CNN_MIN_SIDE:
        return nature_convs(obs_shape[0])
    if min(obs_shape[1:]) >= SMALL_CNN_MIN_SIDE:
        return small_convs(obs_shape[0])
    raise ValueError(f"no CNN for images of {obs_shape[1]}x{obs_shape[2]}: at least "
                     f"{SMALL_CNN_MIN_SIDE}x{SMALL_CNN_MIN_SIDE}")


def scaled_input(obs: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    """Observations in the convolutions' dtype, times the input scale unless an acting copy has
    folded it into its first convolution's weights already (scale 1)."""
    x = obs.to(dtype)
    return x if scale == 1.0 else x * scale


NATURE_CNN_MIN_SIDE = 36  # its 8x8/4, 4x4/2 and 3x3/1 convolutions leave at least 1x1
SMALL_CNN_MIN_SIDE = 3  # its 3x3 convolution; actors/envs.py refuses smaller images before any actor starts


def build_q_network(obs_shape: tuple[int, ...], num_actions: int, hidden: list[int], dueling: bool,
                    obs_dtype: str = "uint8", layer_norm: bool = False, encoder: nn.Module | None = None) -> nn.Module:
    """The Q-network for an observation shape: MLP for flat vectors; for images [C, H, W] the
    Nature CNN from 36x36 up, the small CNN below. uint8 images are scaled by 1/255 inside.
    `layer_norm`: LayerNorm before the ReLU of each fully connected hidden layer. `encoder`: the
    user's (learner/encoders.py) in place of the MLP's input or the CNN."""
    if encoder is not None:
        return EncodedQNetwork(encoder, num_actions, hidden, dueling, layer_norm)
    if len(obs_shape) == 1:
        return MLPQNetwork(obs_shape[0], num_actions, hidden, dueling, layer_norm)
    if len(obs_shape) == 3:
        scale = 1.0 / 255.0 if obs_dtype == "uint8" else 1.0
        if min(obs_shape[1:]) >= NATURE_CNN_MIN_SIDE:
            return NatureCNNQNetwork(obs_shape, num_actions, hidden, dueling, scale, layer_norm)
        if min(obs_shape[1:]) >= SMALL_CNN_MIN_SIDE:
            return SmallCNNQNetwork(obs_shape, num_actions, hidden, dueling, scale, layer_norm)
        raise ValueError(f"no CNN for images of {obs_shape[1]}x{obs_shape[2]}: at least "
                         f"{SMALL_CNN_MIN_SIDE}x{SMALL_CNN_MIN_SIDE}")
    raise ValueError(f"no Q-network for observations of shape {obs_shape}")


def acting_copy(network: nn.Module, dtype: torch.dtype) -> nn.Module:
    """An inference-only copy of `network` with its parameters in `dtype` (bf16 acting on CPUs
    with native bf16 matrix units) and a CNN's input scale folded into its first convolution's
    weights, which saves one pass over the frames per forward. Refresh it with `refresh_acting_copy`."""
    copy = deepcopy(network).requires_grad_(False).to(dtype).eval()
    refresh_acting_copy(copy, network)
    return copy


def refresh_acting_copy(copy: nn.Module, network: nn.Module) -> None:
    """Copy `network`'s current parameters into an `acting_copy` of it (converted, scale folded)."""
    with torch.no_grad():
        for target, source in zip(copy.parameters(), network.parameters(), strict=True):
            target.copy_(source)
        scale = getattr(network, "input_scale", 1.0)
        if scale != 1.0:
            copy.convs[0].weight.copy_(network.convs[0].weight * scale)
            copy.input_scale = 1.0


def greedy_actions(network: nn.Module, obs: np.ndarray) -> np.ndarray:
    """argmax_a Q(obs, a) for a numpy batch on the CPU, without autograd (acting, evaluation)."""
    with torch.inference_mode():
        return network(torch.from_numpy(obs)).argmax(dim=1).numpy()
