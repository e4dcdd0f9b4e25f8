"""The fast rollout policy: a linear softmax over local patterns (one convolution).

Why one layer: rollouts play thousands of moves per leaf evaluation, so the policy that picks
them must cost microseconds a move (AlphaGo's linear softmax over patterns, ~2 us; BAKAGO's
"1 layer for rollout model"). One k x k convolution over the (own, opponent, empty) planes of
the board seen from the side to move gives one logit per point; a placed or removed stone
changes only the logits within the kernel's reach, which is what lets the compiled rollouts
(`services.games.rollout`) update them incrementally instead of running a network per move.
Go's pass logit is a linear function of the planes' means (the share of own, opponent and empty
points); the rollouts do not use it (they pass only when no sensible move is left).

The network takes its game's stored input (`Game.input_shape`, int8) like every configuration,
so the same trainer, shards, export and publish path serve it. The stones come from
`Game.stone_cells` (the board, or the first plane of a planes input); a game whose cells are
colours (`Game.input_from_mover` False: Gomoku) is turned to the mover's view by the stone
count (Black moves when both colours have as many stones), one whose stones are seen from the
mover already (Go) is taken as it is.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from services.games.registry import get_game
from services.games.rollout import RolloutWeights

N_ROLLOUT_PLANES = 3  # own, opponent, empty


class LinearRolloutPolicy(nn.Module):
    """Compact int8 inputs -> logits [N, S*S] (+1 pass logit when `pass_logit`)."""

    def __init__(self, game: str, kernel: int = 5) -> None:
        super().__init__()
        if kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"the rollout kernel must be odd and positive, got {kernel}")
        played = get_game(game)
        self.planes_input = bool(played.input_planes)
        self.from_mover = bool(played.input_from_mover)
        self.kernel = kernel
        self.conv = nn.Conv2d(N_ROLLOUT_PLANES, 1, kernel, padding=kernel // 2)
        self.pass_head = nn.Linear(N_ROLLOUT_PLANES, 1) if played.has_pass else None
        nn.init.zeros_(self.conv.weight)  # a linear softmax: start uniform, as a logistic fit
        nn.init.zeros_(self.conv.bias)

    def mover_planes(self, boards: torch.Tensor) -> torch.Tensor:
        """float32 [N, 3, S, S]: own, opponent and empty points for the side to move."""
        stones = (boards[:, 0] if self.planes_input else boards).long()
        if not self.from_mover:
            black = (stones == 1).flatten(1).sum(1)
            white = (stones == 2).flatten(1).sum(1)
            swapped = torch.where(stones == 0, stones, 3 - stones)
            stones = torch.where((black > white)[:, None, None], swapped, stones)
        return torch.stack([stones == 1, stones == 2, stones == 0], dim=1).float()

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        planes = self.mover_planes(boards)
        logits = self.conv(planes).flatten(1)
        if self.pass_head is not None:
            logits = torch.cat([logits, self.pass_head(planes.mean(dim=(2, 3)))], dim=1)
        return logits

    def weights(self) -> dict[str, np.ndarray]:
        """The raw weights the compiled rollouts take (`services.games.rollout.RolloutWeights`):
        `kernel` float32 [3, k, k] (own, opponent, empty), `bias` float32 [1], `pass_weights`
        float32 [4] (the three planes' means, then the bias; zeros without a pass)."""
        head = np.zeros(N_ROLLOUT_PLANES + 1, np.float32)
        if self.pass_head is not None:
            head[:N_ROLLOUT_PLANES] = self.pass_head.weight.detach().cpu().numpy().reshape(-1)
            head[N_ROLLOUT_PLANES] = float(self.pass_head.bias.detach().cpu())
        return {"kernel": self.conv.weight.detach().cpu().numpy()[0].astype(np.float32),
                "bias": self.conv.bias.detach().cpu().numpy().astype(np.float32),
                "pass_weights": head}


def rollout_weights(net: nn.Module, config: str, top1: float = float("nan")) -> RolloutWeights:
    """A trained rollout network as the compiled rollouts take it and a version stores it
    (`services.repository.rollout_policy`): its weights, configuration name and test top-1."""
    if not isinstance(net, LinearRolloutPolicy):
        raise ValueError(f"{config!r} is not a rollout policy configuration (rollout_kK, "
                         "go_rollout_kK)")
    return RolloutWeights.from_arrays(net.weights(), config, top1)
