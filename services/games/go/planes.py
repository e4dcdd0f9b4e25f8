"""Go's compact int8 [N, 4, S, S] inputs (`services.games.go.features`) expanded into the 17
float feature planes the networks see, on the model's device (see go_features for the planes).
"""

from __future__ import annotations

import torch


def planes_torch(compact_boards: torch.Tensor) -> torch.Tensor:
    """int8 [N, 4, S, S] -> float32 [N, 17, S, S]; scriptable (literal ints only)."""
    c = compact_boards.long()
    stones = torch.nn.functional.one_hot((c[:, 0] + 2) % 3, num_classes=3)  # own, opp, empty
    libs = torch.nn.functional.one_hot(c[:, 1].clamp(0, 4), num_classes=5)[..., 1:]
    own = stones[..., 0:1]
    opp = stones[..., 1:2]
    recent = torch.nn.functional.one_hot(c[:, 2].clamp(0, 4), num_classes=5)[..., 1:]
    ko = (c[:, 3] > 0).long().unsqueeze(-1)
    ones = torch.ones_like(ko)
    planes = torch.cat([stones, libs * own, libs * opp, recent, ko, ones], dim=-1)
    return planes.permute(0, 3, 1, 2).float()
