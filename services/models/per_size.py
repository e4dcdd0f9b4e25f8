"""One network per board size, served as one module.

A network whose weights do not depend on the board size (the Capture Game's sweep networks,
services/models/mdrnn.py) plays every size, but one trained on 5x5 loses almost every 7x7 or 9x9
game: retraining on each size (the paper's incremental scaling) gives one network per size, and
each loses off its own size. `PerSize` holds them all and answers each board with the network
trained for it, so the one served file plays every size at the level its training reached.

It picks by the input's last dim, the board's side length (the planes and boards of every game
here end in [..., S, S]): the network of the largest trained size at or below the board, else
(a board smaller than every trained size) the smallest one. The choice is inside `forward`, so
the scripted module (`services.models.export`) carries every network and picks the same way.
"""

from __future__ import annotations

import torch
from torch import nn


class PerSize(nn.Module):
    """`nets[size]` (each taking the same input and giving the same output) as one module that
    runs, per call, the network trained for the input's side length (see the module
    docstring). All boards of one call have one size (a batch is one tensor)."""

    def __init__(self, nets: dict[int, nn.Module]) -> None:
        super().__init__()
        if not nets:
            raise ValueError("a per-size network needs at least one size")
        self.sizes: list[int] = sorted(int(s) for s in nets)
        self.nets = nn.ModuleList([nets[s] for s in sorted(nets)])

    def pick(self, side: int) -> int:
        """The index in `sizes` of the network that plays a `side` x `side` board."""
        chosen = 0
        for i, size in enumerate(self.sizes):
            if size <= side:
                chosen = i
        return chosen

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        chosen = self.pick(boards.shape[-1])
        out = torch.empty(0)
        for i, net in enumerate(self.nets):  # TorchScript indexes a ModuleList only in a loop
            if i == chosen:
                out = net(boards)
        return out
