"""Named model configurations, listed in one place (in the manner of KataGo's b6c96 names).

`shao_fF_nN` is Shao et al.'s network with F filters and N 3x3 convs; `_fc` uses their fully
connected top instead of the 1x1 conv.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from services.models.shao import BoardPolicy, ShaoPolicyNet

CONFIGS: dict[str, Callable[[], nn.Module]] = {
    "shao_f128_n4": lambda: ShaoPolicyNet(128, 4),  # the paper's default
    "shao_f128_n0": lambda: ShaoPolicyNet(128, 0),
    "shao_f128_n1": lambda: ShaoPolicyNet(128, 1),
    "shao_f128_n2": lambda: ShaoPolicyNet(128, 2),
    "shao_f128_n6": lambda: ShaoPolicyNet(128, 6),
    "shao_f128_n4_fc": lambda: ShaoPolicyNet(128, 4, head="fc"),
    "shao_f32_n2": lambda: ShaoPolicyNet(32, 2),  # small: demo and tests on 2 CPU cores
}


def build(name: str) -> BoardPolicy:
    """A fresh board-input policy for the named configuration."""
    if name not in CONFIGS:
        raise ValueError(f"unknown model config {name!r}; known: {', '.join(sorted(CONFIGS))}")
    return BoardPolicy(CONFIGS[name]())
