"""A value head on any of the policy networks: one scalar per board, the expected result.

`PolicyValue` wraps a built policy (compact int8 boards -> logits; `BoardPolicy` or `GoPolicy`) and
adds a small head on the trunk's features, pooled as in KataGo so that it does not depend on the
board size: 1x1 conv, ReLU, global mean and global max (the max sees "a four somewhere" that a mean
over 225 points dilutes), two linear layers, tanh. Forward returns ``(logits, value)``: the same
logits as the policy alone, and value float32 [N] in [-1, 1], the expected result for the side to
move (+1 win, -1 loss, 0 draw). The trainer fits it to the game results stored in the shards; the
search uses it at leaves that are not finished games.

Gomoku boards hold absolute colours (1 black, 2 white) and the side to move shows only in the stone
counts (Black moves when they are equal), a difference of one stone in 225 points that a pooled
head barely sees. So on a Gomoku input the head predicts Black's result and the wrapper turns it to
the mover's side by that parity; Go inputs are already seen from the mover.
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
        self.fc1 = nn.Linear(2 * VALUE_CHANNELS, VALUE_HIDDEN)
        self.fc2 = nn.Linear(VALUE_HIDDEN, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(features)).flatten(2)
        pooled = torch.cat([x.mean(dim=2), x.amax(dim=2)], dim=1)
        return torch.tanh(self.fc2(torch.relu(self.fc1(pooled)))).squeeze(1)


class PolicyValue(nn.Module):
    """Compact int8 boards -> (logits as the wrapped policy's, value [N] for the mover)."""

    def __init__(self, policy: nn.Module, cells_are_colours: bool) -> None:
        super().__init__()
        self.policy = policy
        self.value_head = ValueHead(policy.net.channels)
        # the input's cells are colours, not the mover's stones (`Game.input_from_mover`):
        # the head then learns Black's value, and the mover's is its negation on White's turn
        self.cells_are_colours = cells_are_colours

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.policy.net.features(self.policy.encode(boards))
        value = self.value_head(x)
        if self.cells_are_colours:  # black to move when both colours have as many stones
            black_to_move = (boards == 1).sum(dim=(1, 2)) == (boards == 2).sum(dim=(1, 2))
            value = torch.where(black_to_move, value, -value)
        return self.policy.net.policy(x), value


def split_outputs(out: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits, value or None) of a model's output, with or without a value head."""
    if isinstance(out, tuple):
        return out[0], out[1]
    return out, None


def value_target(results):
    """The value a head should predict for the mover's stored result: 1 won -> +1, 0 lost -> -1,
    0.5 drawn -> 0 (NaN, unknown, stays NaN). Works on numpy arrays and torch tensors alike."""
    return 2 * results - 1
