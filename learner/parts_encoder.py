"""The default encoder of observations in parts (Dict and Tuple spaces, replay/contracts.py):
each image part through its own CNN, the flat parts as they are, side by side in the parts' order.
The heads' fully connected layers that follow (every algorithm's) are the MLP over both.

Which CNN an image part gets is its network's: a Q-network's convolutions (`ConvFeatures`,
learner/networks.py) or an actor-critic's normalized image encoder (`ImageEncoder`,
learner/actor_critic_networks.py). uint8 parts are scaled to [0, 1] there, as whole images are.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from raypex.replay.contracts import Parts


class PartsEncoder(nn.Module):
    """{key: [B, *shape]} -> features [B, width]; `image_encoder(shape, dtype)` builds each image
    part's CNN (a module with a `width`)."""

    def __init__(self, parts: Parts, image_encoder: Callable[[tuple[int, ...], str], nn.Module]):
        super().__init__()
        self.keys = [key for key, _, _ in parts]
        self.image_keys = [key for key, shape, _ in parts if len(shape) == 3]
        # by position: a ModuleDict's names may not hold a part key's dots
        self.images = nn.ModuleList(image_encoder(tuple(shape), dtype) for _, shape, dtype in parts if len(shape) == 3)
        widths = {key: shape[0] for key, shape, _ in parts if len(shape) == 1}
        self.width = sum(image.width for image in self.images) + sum(widths.values())

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        images = dict(zip(self.image_keys, self.images, strict=True))
        features = [images[key](obs[key]) if key in images else obs[key].float() for key in self.keys]
        dtype = features[0].dtype if all(f.dtype == features[0].dtype for f in features) else torch.float32
        return torch.cat([f.to(dtype) for f in features], dim=1)
