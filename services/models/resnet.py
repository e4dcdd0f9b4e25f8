"""Residual policy networks (BAKAGO's model v3 direction: identity blocks, no pooling).

A stem conv, `blocks` pre-activation-free residual blocks (conv-BN-ReLU-conv-BN + identity,
ReLU), and a 1x1 conv policy head; for Go an extra pass logit comes from pooled features.
"""

from __future__ import annotations

import torch
from torch import nn

from services.games.go import extended_planes as go_extended_planes
from services.games.go import planes as go_planes
from services.models.shao import BoardPolicy


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class ResidualPolicyNet(nn.Module):
    """Planes [N, C, S, S] -> logits [N, S*S] (+1 pass logit when `pass_logit`)."""

    def __init__(self, in_planes: int, blocks: int = 6, channels: int = 96,
                 pass_logit: bool = False) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_planes, channels, 5, padding=2, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU())
        self.blocks = nn.Sequential(*[ResidualBlock(channels) for _ in range(blocks)])
        self.head = nn.Conv2d(channels, 1, 1)
        self.pass_head = nn.Linear(channels, 1) if pass_logit else None
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

        self.channels = channels  # of `features`, for a value head

    def features(self, planes: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.stem(planes))

    def policy(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(x).flatten(1)
        if self.pass_head is not None:
            logits = torch.cat([logits, self.pass_head(x.mean(dim=(2, 3)))], dim=1)
        return logits

    def forward(self, planes: torch.Tensor) -> torch.Tensor:
        return self.policy(self.features(planes))


class GoPolicy(BoardPolicy):
    """Compact Go inputs int8 [N, 4, S, S] -> logits [N, S*S + 1] (last = pass): the served
    form of a Go network, as `BoardPolicy` is of a Gomoku one (the same `forward(boards)`: the
    stock PyTorch backend of Triton binds inputs by the forward argument's name)."""

    def encode(self, boards: torch.Tensor) -> torch.Tensor:
        return go_planes.planes_torch(boards)



class GoExtendedPolicy(BoardPolicy):
    """Extended compact Go inputs int8 [N, 10, S, S] (`services.games.go.encoders`: the basic
    planes and the tactical channels) -> logits [N, S*S + 1]: `GoPolicy` for a network built
    on the extended encoder's 44 planes."""

    def encode(self, boards: torch.Tensor) -> torch.Tensor:
        return go_extended_planes.planes_torch(boards)
