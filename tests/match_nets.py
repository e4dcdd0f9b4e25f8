"""Tiny Gomoku networks whose strength is known by construction, for the match tests.

`LineNet` scores each point by the stones within four points of it along the four lines
(its own side's squared, the opponent's half as much): it builds and extends rows, so it makes
an open four against a player that only blocks fours. `UniformNet` answers equal logits
everywhere: its search follows no preference, and it blocks only what the search's tactics
force. Both take int8 boards [N, 15, 15] and answer logits [N, 225], as a published
``gomoku_policy`` version does.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from services.repository.publish import publish

SIZE = 15


class LineNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        kernel = torch.zeros(4, 1, 9, 9)
        for d, (dy, dx) in enumerate(((0, 1), (1, 0), (1, 1), (1, -1))):
            for t in range(-4, 5):
                if t:
                    kernel[d, 0, 4 + t * dy, 4 + t * dx] = 1.0
        self.register_buffer("kernel", kernel)

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        black, white = boards == 1, boards == 2
        black_to_move = (black.sum(dim=(1, 2)) == white.sum(dim=(1, 2))).view(-1, 1, 1)
        own = torch.where(black_to_move, black, white).float().unsqueeze(1)
        opp = torch.where(black_to_move, white, black).float().unsqueeze(1)
        mine = F.conv2d(own, self.kernel, padding=4)
        theirs = F.conv2d(opp, self.kernel, padding=4)
        return ((mine * mine).sum(1) + 0.5 * (theirs * theirs).sum(1)).flatten(1)


class UniformNet(nn.Module):
    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        return boards.float().flatten(1) * 0.0


def save(net: nn.Module, path: Path) -> Path:
    example = torch.zeros(2, SIZE, SIZE, dtype=torch.int8)
    torch.jit.trace(net.eval(), example).save(str(path))
    return path


def publish_net(net: nn.Module, repository: Path, folder: Path) -> int:
    """Publish `net` as the next ``gomoku_policy`` version of `repository`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = save(net, folder / f"{type(net).__name__}-{len(list(folder.iterdir()))}.pt")
    return publish(path, repository, "gomoku_policy", validate=False, game="gomoku",
                   source=type(net).__name__)


def uniform_and_line_repo(tmp_path: Path) -> tuple[Path, int, int]:
    """A repository under `tmp_path` with the uniform network and the line network published:
    (repository, uniform's version, line's version)."""
    repository = tmp_path / "repo"
    uniform = publish_net(UniformNet(), repository, tmp_path / "nets")
    lines = publish_net(LineNet(), repository, tmp_path / "nets")
    return repository, uniform, lines
