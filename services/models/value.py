"""A value head on any of the policy networks: one scalar per board, the expected result.

`PolicyValue` wraps a built policy (compact int8 boards -> logits; `BoardPolicy`,
`GomokuResidual` or `GoPolicy`) and adds a small head on the trunk's features (AlphaZero /
KataGo style, but pooled so it does not depend on the board size): 1x1 conv, ReLU, global mean,
two linear layers, tanh. Forward returns ``(logits, value)``: the same logits as the policy
alone, and value float32 [N] in [-1, 1], the expected result for the side to move (+1 win,
-1 loss, 0 draw). The trainer fits it to the game results stored in the shards; the search
uses it at leaves that are not finished games.
"""

from __future__ import annotations

import torch
from torch import nn

VALUE_CHANNELS = 32
VALUE_HIDDEN = 64


class ValueHead(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, VALUE_CHANNELS, 1)
        self.fc1 = nn.Linear(VALUE_CHANNELS, VALUE_HIDDEN)
        self.fc2 = nn.Linear(VALUE_HIDDEN, 1)
        nn.init.zeros_(self.fc2.weight)  # starts at value 0 everywhere: "no opinion"
        nn.init.zeros_(self.fc2.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(features)).mean(dim=(2, 3))
        return torch.tanh(self.fc2(torch.relu(self.fc1(x)))).squeeze(1)


class PolicyValue(nn.Module):
    """Compact int8 boards -> (logits as the wrapped policy's, value [N] for the mover)."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy
        self.value_head = ValueHead(policy.net.channels)

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.policy.net.features(self.policy.encode(boards))
        return self.policy.net.policy(x), self.value_head(x)


def split_outputs(out: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits, value or None) of a model's output, with or without a value head."""
    if isinstance(out, tuple):
        return out[0], out[1]
    return out, None
