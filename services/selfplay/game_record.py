"""What a self-play game leaves: its moves with their search figures, its result and lineage.

Its own module, apart from `play` (which makes these records with the search): the files
(`records`) and the ingest (`pairs`) read them without importing the search, so the ingest's
cache key (the code its tasks import, `services.import_closure`) does not change with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MoveRecord:
    move: int
    full: bool  # searched fully (its `target` is a policy target) or quickly
    visits: int  # the root's visits when the move was chosen (reused ones included)
    value: float  # the root's value for the side to move, in [-1, 1]
    target: tuple[tuple[int, int], ...] = ()  # (move, visits) of the root's children (full)


@dataclass
class SelfPlayGame:
    game: str
    size: int
    seed: int
    opening: tuple[int, ...]
    no_resign: bool
    moves: list[MoveRecord] = field(default_factory=list)
    winner: int = 0  # BLACK, WHITE, or 0 (a draw or no result)
    end: str = ""
    would_resign: tuple[int, int] | None = None  # (ply, colour) of the first resignation
    model_name: str = ""
    model_version: str = ""

    @property
    def all_moves(self) -> tuple[int, ...]:
        """The opening and the searched moves, from the empty board."""
        return self.opening + tuple(m.move for m in self.moves)


__all__ = ["MoveRecord", "SelfPlayGame"]
