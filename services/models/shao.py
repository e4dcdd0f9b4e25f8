"""The move-prediction CNN of Shao et al. 2016 (Fig. 4): 5x5 conv, N 3x3 convs, 1x1 conv top.

Input: three one-hot planes (black, white, empty) of a 15x15 board; ReLU after every conv,
zero padding, no pooling; the top is a 1x1 conv to one plane (their best) or a fully connected
layer; softmax over the 225 points is applied by the loss / the consumer. Weights use
glorot-uniform initialisation as in the paper.
"""

from __future__ import annotations

import torch
from torch import nn

from services.games.encoding import N_PLANES, planes_torch


class ShaoPolicyNet(nn.Module):
    def __init__(self, filters: int = 128, n_convs: int = 4, head: str = "conv",
                 batch_norm: bool = False, board_size: int = 15) -> None:
        super().__init__()
        if head not in ("conv", "fc"):
            raise ValueError(f"head must be 'conv' or 'fc', got {head!r}")
        layers: list[nn.Module] = [nn.Conv2d(N_PLANES, filters, 5, padding=2)]
        layers += [nn.BatchNorm2d(filters)] if batch_norm else []
        layers.append(nn.ReLU())
        for _ in range(n_convs):
            layers.append(nn.Conv2d(filters, filters, 3, padding=1))
            layers += [nn.BatchNorm2d(filters)] if batch_norm else []
            layers.append(nn.ReLU())
        self.trunk = nn.Sequential(*layers)
        points = board_size * board_size
        self.head = (nn.Conv2d(filters, 1, 1) if head == "conv"
                     else nn.Sequential(nn.Flatten(), nn.Linear(filters * points, points)))
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

        self.channels = filters  # of `features`, for a value head

    def features(self, planes: torch.Tensor) -> torch.Tensor:
        return self.trunk(planes)

    def policy(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features).flatten(1)

    def forward(self, planes: torch.Tensor) -> torch.Tensor:
        return self.policy(self.features(planes))


class BoardPolicy(nn.Module):
    """Wraps a network so it takes compact int8 boards [N, H, W] and returns logits [N, H*W].

    This is the exported, served form: callers ship int8 cells and the one-hot expansion
    happens on the model's device. Other games override `encode` (`resnet.GoPolicy`).
    """

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def encode(self, boards: torch.Tensor) -> torch.Tensor:
        return planes_torch(boards)

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        return self.net(self.encode(boards))
