"""Go's network input encoders, by name: what a Go network takes and how it gets it.

Why: one game, more than one input. The "basic" encoder is the one every Go network, shard
and served request has used so far (`services.games.go.features`: int8 [4, S, S], 17 float
planes); "extended" adds the tactical channels of `services.games.go.tactics` (captures,
self-atari, liberties after the move, ladders, sensibleness), which a network has to be
built for. Naming them lets a model configuration say which input it takes
(`services.models.configs.ModelSpec.encoder`) and the data path and the serving path compute
that one (`GoGame.encoders`).

An encoder has two halves, on two machines: the compact int8 planes, built on the CPU from a
position (`compact`) or from the basic planes already in a shard or a request
(`compact_batch`: the tactical channels depend only on the stones and the ko point, which the
basic planes hold), and their float expansion on the model's device (`planes_torch`, the same
function the scripted network runs). This module needs numpy and numba, not torch: the torch
halves are imported when called.

The extended input, int8 [EXTENDED_CHANNELS, S, S]: the 4 basic planes, then the
`go_tactics.TACTICAL_CHANNELS` channels in `go_tactics`' order (capture size, self-atari size,
liberties after the move, each 0..7; ladder capture, ladder escape, sensible, each 0/1). Its
N_EXTENDED_PLANES float planes: the 17 basic ones, then each count one-hot over 0..7
(AlphaGo's encoding: 8 planes each, so "0 on this empty point" is a plane of its own), then
the three 0/1 channels as they are (`services.games.go.extended_planes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.games.go import features as go_features
from services.games.go import tactics as go_tactics
from services.games.go.rules import GoState

EXTENDED_CHANNELS = go_features.COMPACT_CHANNELS + go_tactics.TACTICAL_CHANNELS  # 10
COUNT_PLANES = go_tactics.MAX_COUNT + 1  # one-hot 0..7
N_EXTENDED_PLANES = go_features.N_GO_PLANES + 3 * COUNT_PLANES + 3  # 44


@dataclass(frozen=True)
class GoEncoder:
    """One way of feeding a Go position to a network (see the module docstring)."""

    name: str
    channels: int  # compact int8 channels of one position: [channels, S, S]
    planes: int  # float planes the network's first layer sees
    max_value: int  # the largest value of the compact input

    def input_shape(self, size: int) -> tuple[int, int, int]:
        return (self.channels, size, size)

    def compact(self, state: GoState, to_move: int | None = None) -> np.ndarray:
        """int8 [channels, S, S] of `state` seen from `to_move` (default: its side to move)."""
        return self.compact_batch(go_features.compact(state, to_move)[None])[0]

    def compact_batch(self, compact4: np.ndarray) -> np.ndarray:
        """The basic int8 [N, 4, S, S] planes -> this encoder's int8 [N, channels, S, S]."""
        compact4 = np.asarray(compact4, dtype=np.int8)
        if self.channels == go_features.COMPACT_CHANNELS:
            return compact4
        return np.concatenate([compact4, go_tactics.tactical_planes(compact4)], axis=1)

    def planes_torch(self, boards):
        """torch int8 [N, channels, S, S] -> float32 [N, planes, S, S] (imports torch)."""
        if self.channels == go_features.COMPACT_CHANNELS:
            from services.games.go import planes as go_planes

            return go_planes.planes_torch(boards)
        from services.games.go import extended_planes as go_extended_planes

        return go_extended_planes.planes_torch(boards)


BASIC = GoEncoder("basic", go_features.COMPACT_CHANNELS, go_features.N_GO_PLANES,
                  go_features.MAX_LIBERTIES)
EXTENDED = GoEncoder("extended", EXTENDED_CHANNELS, N_EXTENDED_PLANES, go_tactics.MAX_COUNT)
ENCODERS: dict[str, GoEncoder] = {e.name: e for e in (BASIC, EXTENDED)}
