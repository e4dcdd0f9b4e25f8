"""Go positions as the search service sees them: a `GoState` plus how it arose and the komi.

`GoPosition` gives the search what it needs from a Go position, in the same shape as
`GomokuState` gives it for Gomoku: `size`, `to_move`, `moves` (flat points, the pass is
`size * size`), `board`, `play(move)` and `legal_mask()` (over the points *and* the pass, so a
Go policy has `size * size + 1` entries), plus what only Go has:

* `features()`: the compact int8 [4, S, S] network input (`services.games.go_features`), which
  is what the `go_policy` model on Triton takes (any served size S, `GO_SIZES`: 9..19);
* `terminal_value()`: after two consecutive passes the game is over and scored by area
  (stones plus empty regions bordered by one colour only, dead stones are *not* removed) with
  komi: +1 for the player who made the last pass when that player wins, -1 when it loses,
  0 for a tie (jigo);
* `search_candidates(legal)`: the moves the tree search considers: every legal point except
  the ones that fill one of the mover's own single-point eyes (the classic eye rule of
  Monte-Carlo Go programs: all orthogonal neighbours are own stones and the diagonals hold at
  most one opponent stone, none on the edge), plus the pass, which is always a candidate.
  Filling an own eye is legal (the policy shows it) but never searched.

The rules are `services.games.go` (captures, suicide illegal, simple ko, two passes end the
game); this module only adds the bookkeeping.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from services.games.go import (
    BLACK,
    EMPTY,
    GTP_LETTERS,
    SERVED_MAX_SIZE,
    SERVED_MIN_SIZE,
    WHITE,
    GoState,
    opponent,
    point_name,
)

GO_SIZE = 19  # the default size (board_size 0 in a request, GTP before any boardsize)
# The sizes served (requests, GTP `boardsize`): 9..19, see services/games/go.py for why.
GO_MIN_SIZE, GO_MAX_SIZE = SERVED_MIN_SIZE, SERVED_MAX_SIZE
GO_SIZES = range(GO_MIN_SIZE, GO_MAX_SIZE + 1)
DEFAULT_KOMI = 7.5


class VertexError(ValueError):
    """A GTP vertex that does not denote a point (or a pass) on the board."""


def parse_vertex(text: str, size: int = GO_SIZE) -> int | None:
    """GTP vertex ("D4", "q16", "pass") -> flat point y * size + x, or None for a pass."""
    token = text.strip().upper()
    if token == "PASS":
        return None
    if len(token) < 2 or token[0] not in GTP_LETTERS[:size] or not token[1:].isdigit():
        raise VertexError(f"not a vertex on a {size}x{size} board: {text!r}")
    row = int(token[1:])
    if not 1 <= row <= size:
        raise VertexError(f"not a vertex on a {size}x{size} board: {text!r}")
    return (row - 1) * size + GTP_LETTERS.index(token[0])


def vertex(move: int | None, size: int = GO_SIZE) -> str:
    """Flat point (or None / size * size for a pass) -> GTP vertex ("D4", "pass")."""
    if move is None or move == size * size:
        return "pass"
    return point_name(move, size)


@cache
def _geometry(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(orthogonal [N, 4], diagonal [N, 4], on-edge [N]) neighbour indices of every point;
    missing neighbours (off the board) are the sentinel N."""
    n = size * size
    orth = np.full((n, 4), n, dtype=np.intp)
    diag = np.full((n, 4), n, dtype=np.intp)
    for p in range(n):
        y, x = divmod(p, size)
        for k, (dx, dy) in enumerate(((-1, 0), (1, 0), (0, -1), (0, 1))):
            if 0 <= x + dx < size and 0 <= y + dy < size:
                orth[p, k] = (y + dy) * size + x + dx
        for k, (dx, dy) in enumerate(((-1, -1), (1, -1), (-1, 1), (1, 1))):
            if 0 <= x + dx < size and 0 <= y + dy < size:
                diag[p, k] = (y + dy) * size + x + dx
    return orth, diag, (diag == n).any(axis=1)


def own_eyes(state: GoState, color: int) -> np.ndarray:
    """Empty points that are single-point eyes of `color` (see the module docstring)."""
    size = state.size
    n = size * size
    orth, diag, edge = _geometry(size)
    cells = np.empty(n + 1, dtype=np.uint8)
    cells[:n] = np.frombuffer(state.cells, dtype=np.uint8)
    cells[n] = color  # off the board counts as own for the orthogonal neighbours
    surrounded = (cells[:n] == EMPTY) & (cells[orth] == color).all(axis=1)
    if not surrounded.any():
        return np.empty(0, dtype=np.intp)
    cells[n] = EMPTY  # ... and as no opponent for the diagonals
    bad = (cells[diag] == opponent(color)).sum(axis=1)
    return np.flatnonzero(surrounded & ((bad == 0) | ((bad == 1) & ~edge)))


class GoPosition:
    """An immutable Go position with its komi, its move sequence and its set-up.

    `moves` are flat points in play order (`size * size` is a pass); `setup` identifies what
    the moves started from (the set-up board and who moved first), so two positions with equal
    `setup` and `moves` are the same game state (the tree cache relies on it).
    """

    game = "go"
    __slots__ = ("komi", "moves", "setup", "state")

    def __init__(
        self,
        state: GoState,
        komi: float = DEFAULT_KOMI,
        moves: tuple[int, ...] = (),
        setup: bytes | None = None,
    ) -> None:
        self.state = state
        self.komi = float(komi)
        self.moves = moves
        self.setup = setup if setup is not None else bytes([state.to_move]) + state.cells

    # ---- what the search needs (the GomokuState interface) --------------------------------
    @property
    def size(self) -> int:
        return self.state.size

    @property
    def to_move(self) -> int:
        return self.state.to_move

    @property
    def pass_move(self) -> int:
        return self.state.size * self.state.size

    @property
    def policy_size(self) -> int:
        """Entries of a policy: every point, then the pass."""
        return self.state.size * self.state.size + 1

    @property
    def board(self) -> np.ndarray:
        return self.state.board

    @property
    def is_over(self) -> bool:
        return self.state.is_over

    @property
    def rule(self) -> str:
        return f"go-area komi {self.komi:g}"

    def play(self, move: int) -> GoPosition:
        """Play flat point `move` (`size * size`: pass); raises `IllegalMove` as GoState does."""
        point = None if move == self.pass_move else int(move)
        return GoPosition(self.state.play(point), self.komi, (*self.moves, int(move)), self.setup)

    def legal_mask(self) -> np.ndarray:
        """Boolean [size * size + 1]: the legal points, then the pass (all False once over)."""
        return self.state.legal_mask(include_pass=True)

    def features(self) -> np.ndarray:
        """The network input: compact int8 [4, size, size] seen from the side to move."""
        from services.games import go_features  # lazy: it imports torch (for the planes)

        return go_features.compact(self.state)

    def base_key(self) -> tuple[str, int, bytes]:
        """What the game is besides its moves (the tree cache's key, with `moves`)."""
        return (self.rule, self.size, self.setup)

    # ---- Go only ----------------------------------------------------------------------------
    def score(self) -> float:
        """Area score from Black's side minus komi (> 0: Black is ahead), no dead stones."""
        return self.state.score(self.komi)

    def winner(self) -> int:
        """BLACK, WHITE or EMPTY (a tie) by `score`."""
        s = self.score()
        return BLACK if s > 0 else WHITE if s < 0 else EMPTY

    def terminal_value(self) -> float:
        """The score's verdict for the player who made the last move: +1 win, -1 loss, 0 tie."""
        w = self.winner()
        if w == EMPTY:
            return 0.0
        return 1.0 if w == opponent(self.to_move) else -1.0

    def search_candidates(self, legal: np.ndarray | None = None) -> list[int]:
        """Legal moves the search considers (ascending, the pass last): no own-eye fills."""
        if legal is None:
            legal = self.legal_mask()
        points = legal[: self.pass_move].copy()
        eyes = own_eyes(self.state, self.to_move)
        if len(eyes):
            points[eyes] = False
        return [*np.flatnonzero(points).tolist(), self.pass_move]

    def move_name(self, move: int) -> str:
        return vertex(move, self.size)

    def __repr__(self) -> str:
        return (f"GoPosition(size={self.size}, moves={len(self.moves)}, komi={self.komi:g}, "
                f"to_move={'black' if self.to_move == BLACK else 'white'})")
