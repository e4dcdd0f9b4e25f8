"""Go's extended compact inputs int8 [N, 10, S, S] (`services.games.go.encoders`: the 4 basic
planes, then the 6 tactical channels of `services.games.go.tactics`) expanded into the 44
float planes the extended networks see, on the model's device.

The planes: the basic 17 (`go_planes.planes_torch` of channels 0..3), then capture size,
self-atari size and liberties after the move each one-hot over 0..7 (8 planes each, AlphaGo's
encoding), then ladder capture, ladder escape and sensibleness as 0/1 planes. Scriptable with
TorchScript (literal ints only, as `go_planes`), so the served network expands its own input.
"""

from __future__ import annotations

import torch

from services.games.go import planes as go_planes


def planes_torch(compact_boards: torch.Tensor) -> torch.Tensor:
    """int8 [N, 10, S, S] -> float32 [N, 44, S, S]; scriptable."""
    basic = go_planes.planes_torch(compact_boards[:, 0:4])
    c = compact_boards[:, 4:10].long()
    counts = torch.nn.functional.one_hot(c[:, 0:3].clamp(0, 7), num_classes=8)  # [N, 3, S, S, 8]
    counts = counts.permute(0, 1, 4, 2, 3).flatten(1, 2)  # [N, 24, S, S]: channel-major
    flags = (c[:, 3:6] > 0).long()
    return torch.cat([basic, counts.float(), flags.float()], dim=1)
