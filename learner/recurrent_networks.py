"""RecurrentQNetwork: R2D2's Q-network: a torso (an MLP for flat observations; for images the
CNN learner/networks.py picks by their size, then the MLP), an LSTM cell and a dueling head. One
call is one step, `(obs [B, ...], (h, c)) -> (q [B, A], (h, c))`, the form learner/r2d2_targets.py
`unroll` runs over a sequence and collectors act with step by step. uint8 images are scaled to
[0, 1] inside, as the feed-forward CNNs do."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from raypex.learner.networks import conv_output_width, image_convs, relu_mlp


class RecurrentQNetwork(nn.Module):
    """Torso (a CNN for images, or the user's encoder, then `hidden`), an LSTM cell of `recurrent_size` units, dueling value
    and advantage heads.
    With `core` "mlp" a ReLU layer of the same width stands in for the LSTM: the state goes through
    unchanged (zeros), so the network sees one observation at a time, as a feed-forward one does."""

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden: list[int], recurrent_size: int,
                 dueling: bool = True, core: str = "lstm", obs_dtype: str = "float32", encoder: nn.Module | None = None):
        super().__init__()
        self.input_scale = 1.0 / 255.0 if obs_dtype == "uint8" else 1.0
        self.encoder = encoder  # the user's (network.encoder, learner/encoders.py) in place of the CNN
        self.convs = image_convs(tuple(obs_shape)) if len(obs_shape) == 3 and encoder is None else None
        if encoder is not None:
            width = encoder.width
        else:
            width = conv_output_width(self.convs, tuple(obs_shape)) if self.convs is not None else obs_shape[0]
        self.torso, width = relu_mlp(width, hidden)
        self.core = nn.LSTMCell(width, recurrent_size) if core == "lstm" else nn.Linear(width, recurrent_size)
        self.recurrent_size = recurrent_size
        self.advantage = nn.Linear(recurrent_size, num_actions)
        self.value = nn.Linear(recurrent_size, 1) if dueling else None

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """The state an episode starts from: zeros, (h, c) each [batch, recurrent_size]."""
        zeros = torch.zeros(batch, self.recurrent_size, device=device)
        return zeros, zeros.clone()

    def forward(self, obs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        x = self.encoder(obs) if self.encoder is not None else obs.to(self.advantage.weight.dtype)
        if self.convs is not None:
            x = self.convs(x if self.input_scale == 1.0 else x * self.input_scale)
        features = self.torso(x)
        if isinstance(self.core, nn.LSTMCell):
            h, c = self.core(features, state)
        else:  # no memory: the state passes through
            (_, c), h = state, F.relu(self.core(features))
        advantage = F.linear(h, self.advantage.weight, self.advantage.bias)
        if self.value is None:
            return advantage, (h, c)
        value = F.linear(h, self.value.weight, self.value.bias)
        return value + advantage - advantage.mean(dim=1, keepdim=True), (h, c)


class StatefulQ(nn.Module):
    """The recurrent Q-network with its state as one tensor, h and c side by side: `(obs [B, obs_dim],
    state [B, 2R]) -> (q [B, A], state [B, 2R])`, the form replay stores, collectors act with and
    policy.pt2 holds."""

    def __init__(self, network: RecurrentQNetwork):
        super().__init__()
        self.network = network
        self.state_size = 2 * network.recurrent_size

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, c = state.split(self.network.recurrent_size, dim=-1)
        q, (h, c) = self.network(obs, (h, c))
        return q, torch.cat([h, c], dim=-1)
