"""Go rules: captures, suicide, simple ko, passes, set-up stones, area scoring, replay.

Conventions (shared with the rest of `services.games`): a point is the flat index
`y * size + x`, x the column from the left (0 = 'a'), y the row from the *bottom* (0 = row 1);
`board[y, x]` holds EMPTY=0, BLACK=1, WHITE=2 as int8. SGF coordinates count rows from the
*top* (`B[pd]` is x = 15 on the 4th row from the top, i.e. GTP Q16), so an SGF point
(col, row_from_top) is the index `(size - 1 - row_from_top) * size + col`;
`services.records.sgf` does that conversion and `sgf_point` / `sgf_name` here convert back
and forth. Human-readable names use GTP letters
(A..T without I, row 1 at the bottom): `point_name(72, 19)` == "Q4".

Rules implemented (what a policy-net data pipeline needs, no more):
* a stone with no liberties after the opponent's captures are removed is suicide: illegal;
* captures remove every opponent group adjacent to the move that has no liberty left;
* **simple ko**: a move that captures exactly one stone, with the capturing stone left as a
  single stone with exactly one liberty (the captured point), forbids the captured colour
  from playing back on that point on its very next move (that retake would recreate the
  previous position). Any other move, a pass, or set-up stones clear it. Positional superko
  is *not* checked, so triple ko and other long cycles are legal here;
* a pass is always legal; two consecutive passes end the game (`is_over`), after which
  `play` raises `IllegalMove("game over")` unless `resume()` is called first (KGS-style
  records continue after two passes when the players disagree about dead stones);
* a move may be played by either colour (`play(p, color=...)`): SGF records may have two
  moves of the same colour in a row;
* area scoring (`score`): stones on the board plus empty regions that touch only one colour,
  minus komi, from Black's side. Dead stones are *not* removed: score finished positions.

Board sizes 2..25 are accepted (5..19 are the ones this project trains on).

Speed: the position is a flat `bytes` object and the neighbour lists are cached per size, so
a move costs one 361-byte copy plus flood fills that stop at the first liberty found; the
numpy `board` is built only when asked for; the per-point liberties and the legal mask, asked
of every position a search or an annealing evaluates, are compiled scans
(`services.games.go.scan`). Replaying the 4,739 parsed games of
../shared/data/go-other (779k moves) runs at roughly 150-250k moves/s on 2 shared CPU cores
(tests print the figure).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import NamedTuple, Protocol

import numpy as np

# the coordinate systems live in services.coords; these names are the Go ones
from services.coords import GTP_LETTERS, SGF_LETTERS, sgf_name, sgf_point  # noqa: F401
from services.coords import gtp_name as point_name
from services.games.ascii_board import board_from_ascii
from services.games.go.scan import legal_points
from services.games.grid_kernels import group_liberties, neighbour_table

GAME_NAME = "go"  # the name services.games.go.game registers these rules' Game under
# A game replayed into training pairs that hits an illegal move keeps its pairs before it: its
# note in the quarantine table starts with TRUNCATED, and the ingest counts such games under
# TRUNCATED_NOTE.
TRUNCATED = "cut short by an illegal move: "
TRUNCATED_NOTE = "truncated"
EMPTY, BLACK, WHITE = 0, 1, 2
MIN_SIZE, MAX_SIZE = 2, 25
# Board sizes Go is *served* on (Triton's go_policy, the search service, `movepred gtp`): 9..19.
# The Go networks are fully convolutional (the pass logit and the value head pool globally), so
# one network answers any size; the range keeps to the sizes that are played and that make
# sense for networks trained on 19x19 games: 19 is the largest (the training data, GNU Go and
# most GTP tools stop there), 9 the smallest standard board (below it nearly every point sits
# on the edge, which a 19x19-trained network has rarely seen).
SERVED_MIN_SIZE, SERVED_MAX_SIZE = 9, 19
HISTORY_LEN = 8  # positions kept in `history` (current one included)

OCCUPIED, SUICIDE, KO, OFF_BOARD, GAME_OVER = "occupied", "suicide", "ko", "off board", "game over"


class IllegalMove(ValueError):
    """A move or set-up stone the rules forbid; `reason` is one of occupied, suicide, ko,
    off board, game over, and `point` the offending point (None for a pass)."""

    def __init__(self, reason: str, point: int | None = None, detail: str = "") -> None:
        self.reason = reason
        self.point = point
        super().__init__(f"{reason}: {detail}" if detail else reason)


def opponent(color: int) -> int:
    return WHITE if color == BLACK else BLACK


@cache
def neighbours(size: int) -> tuple[tuple[int, ...], ...]:
    """nbrs[p] = the orthogonal neighbours of point p on a size x size board."""
    out = []
    for p in range(size * size):
        y, x = divmod(p, size)
        n = []
        if x > 0:
            n.append(p - 1)
        if x < size - 1:
            n.append(p + 1)
        if y > 0:
            n.append(p - size)
        if y < size - 1:
            n.append(p + size)
        out.append(tuple(n))
    return tuple(out)


def _dead_group(cells: bytearray | bytes, start: int, nbrs: Sequence[Sequence[int]]) -> set[int]:
    """The stones of the group at `start` if it has no liberty, else an empty set."""
    color = cells[start]
    seen = {start}
    stack = [start]
    while stack:
        p = stack.pop()
        for q in nbrs[p]:
            v = cells[q]
            if v == EMPTY:
                return set()
            if v == color and q not in seen:
                seen.add(q)
                stack.append(q)
    return seen


class GoState:
    """An immutable Go position: `play` and `add_stones` return new states.

    Attributes: `size`; `cells` (bytes, flat, index y*size+x); `to_move`; `ko` (the point the
    side to move may not take back on, or None); `passes` (consecutive passes so far);
    `move_number` (moves and passes played); `history` (the last HISTORY_LEN positions as
    bytes, current first); `last_moves` (the last HISTORY_LEN moves, oldest first, None =
    pass); `captures` ({BLACK: stones Black captured, WHITE: ...}).
    """

    __slots__ = ("_ko_color", "captures", "cells", "history", "ko", "last_moves",
                 "move_number", "passes", "size", "to_move")

    def __init__(self, size: int = 19, to_move: int = BLACK) -> None:
        if not MIN_SIZE <= size <= MAX_SIZE:
            raise ValueError(f"board size must be between {MIN_SIZE} and {MAX_SIZE}, got {size}")
        self.size = size
        self.cells = bytes(size * size)
        self.to_move = to_move
        self.ko: int | None = None
        self._ko_color = EMPTY
        self.passes = 0
        self.move_number = 0
        self.history: tuple[bytes, ...] = (self.cells,)
        self.last_moves: tuple[int | None, ...] = ()
        self.captures = {BLACK: 0, WHITE: 0}

    # ---- construction -------------------------------------------------------------------
    def _derive(self, cells: bytes, to_move: int) -> GoState:
        new = object.__new__(GoState)
        new.size = self.size
        new.cells = cells
        new.to_move = to_move
        new.ko = None
        new._ko_color = EMPTY
        new.passes = 0
        new.move_number = self.move_number
        new.history = (cells, *self.history[: HISTORY_LEN - 1])
        new.last_moves = self.last_moves
        new.captures = self.captures
        return new

    @classmethod
    def from_board(cls, board: np.ndarray, to_move: int = BLACK) -> GoState:
        """A state holding `board` ([size, size], board[y, x]) as set-up stones."""
        size = int(board.shape[0])
        state = cls(size, to_move)
        flat = np.asarray(board, dtype=np.int8).reshape(-1)
        black = [int(p) for p in np.flatnonzero(flat == BLACK)]
        white = [int(p) for p in np.flatnonzero(flat == WHITE)]
        return state.add_stones(black, white, to_move=to_move)

    @classmethod
    def from_ascii(cls, text: str, to_move: int = BLACK) -> GoState:
        """Test fixtures: rows top first, 'X' black, 'O' white, '.' (or '+') empty."""
        return cls.from_board(board_from_ascii(text), to_move)

    def add_stones(
        self,
        black: Iterable[int] = (),
        white: Iterable[int] = (),
        empty: Iterable[int] = (),
        to_move: int | None = None,
    ) -> GoState:
        """Set-up stones (SGF AB / AW / AE): no captures, no legality beyond the point being
        on the board and, for AB / AW, empty (raises IllegalMove 'occupied' otherwise)."""
        cells = bytearray(self.cells)
        n = self.size * self.size
        for p in empty:
            if not 0 <= p < n:
                raise IllegalMove(OFF_BOARD, p, f"set-up point {p} on a {self.size}x{self.size}")
            cells[p] = EMPTY
        for color, points in ((BLACK, black), (WHITE, white)):
            for p in points:
                if not 0 <= p < n:
                    raise IllegalMove(OFF_BOARD, p,
                                      f"set-up point {p} on a {self.size}x{self.size} board")
                if cells[p] != EMPTY:
                    raise IllegalMove(OCCUPIED, p,
                                      f"set-up stone on {point_name(p, self.size)}")
                cells[p] = color
        new = self._derive(bytes(cells), self.to_move if to_move is None else to_move)
        new.history = (new.cells, *self.history[1:])  # set-up edits the position: no new step
        return new

    def resume(self) -> GoState:
        """The same position with the pass count reset, so play can go on after two passes."""
        new = self._derive(self.cells, self.to_move)
        new.history = self.history
        return new

    def key(self, recent_moves: int = HISTORY_LEN) -> tuple:
        """What decides the rules from this position on, whatever order of moves led to it
        (the board, the side to move, the ko, the passes, the captures), and the last
        `recent_moves` moves (what a network input holds of the history). Two states with
        equal keys have the same legal moves and the same result of every move, and the
        states after the same move have equal keys again."""
        return (self.cells, self.to_move, self.ko, self._ko_color, self.passes,
                self.last_moves[-recent_moves:] if recent_moves else (),
                self.captures[BLACK], self.captures[WHITE])

    # ---- play ---------------------------------------------------------------------------
    @property
    def is_over(self) -> bool:
        return self.passes >= 2

    def play(self, point: int | None, color: int | None = None) -> GoState:
        """Play `point` (None = pass) for `color` (default: the side to move)."""
        if self.passes >= 2:
            raise IllegalMove(GAME_OVER, point, "two consecutive passes ended the game")
        c = self.to_move if color is None else color
        opp = WHITE if c == BLACK else BLACK
        if point is None:
            new = self._derive(self.cells, opp)
            new.passes = self.passes + 1
            new.move_number = self.move_number + 1
            new.last_moves = (*self.last_moves[1 - HISTORY_LEN:], None)
            return new
        size = self.size
        if not 0 <= point < size * size:
            raise IllegalMove(OFF_BOARD, point, f"point {point} on a {size}x{size} board")
        if self.cells[point] != EMPTY:
            raise IllegalMove(OCCUPIED, point, point_name(point, size))
        if point == self.ko and c == self._ko_color:
            raise IllegalMove(KO, point, f"{point_name(point, size)} retakes the ko at once")
        nbrs = neighbours(size)
        cells = bytearray(self.cells)
        cells[point] = c
        captured: list[int] = []
        liberty = False
        for q in nbrs[point]:
            v = cells[q]
            if v == opp:
                dead = _dead_group(cells, q, nbrs)
                if dead:
                    for s in dead:
                        cells[s] = EMPTY
                    captured.extend(dead)
            elif v == EMPTY:
                liberty = True
        if not captured and not liberty and _dead_group(cells, point, nbrs):
            raise IllegalMove(SUICIDE, point, point_name(point, size))
        new = self._derive(bytes(cells), opp)
        new.move_number = self.move_number + 1
        new.last_moves = (*self.last_moves[1 - HISTORY_LEN:], point)
        if captured:
            new.captures = {**self.captures, c: self.captures[c] + len(captured)}
            if len(captured) == 1:
                own = empties = 0
                for q in nbrs[point]:
                    v = cells[q]
                    if v == c:
                        own += 1
                    elif v == EMPTY:
                        empties += 1
                if own == 0 and empties == 1:
                    new.ko = captured[0]
                    new._ko_color = opp
        return new

    def is_legal(self, point: int | None, color: int | None = None) -> bool:
        try:
            self.play(point, color)
        except IllegalMove:
            return False
        return True

    # ---- features -------------------------------------------------------------------------
    @property
    def board(self) -> np.ndarray:
        """int8 [size, size], board[y, x] (row 0 at the bottom); a fresh array."""
        return np.frombuffer(self.cells, dtype=np.int8).reshape(self.size, self.size).copy()

    def board_history(self, n: int = HISTORY_LEN) -> np.ndarray:
        """int8 [n, size, size]: the current and up to n-1 earlier positions, newest first,
        zero-padded past the start of the game."""
        out = np.zeros((n, self.size, self.size), dtype=np.int8)
        for i, cells in enumerate(self.history[:n]):
            out[i] = np.frombuffer(cells, dtype=np.int8).reshape(self.size, self.size)
        return out

    def liberties(self) -> np.ndarray:
        """int16 [size, size]: liberties of the group on each point, 0 on empty points."""
        libs = group_liberties(self.cell_values(), neighbour_table(self.size))
        return libs.astype(np.int16).reshape(self.size, self.size)

    def legal_mask(self, color: int | None = None, include_pass: bool = False) -> np.ndarray:
        """Boolean mask over the flat board (plus a last entry for pass when `include_pass`)
        of the moves `color` (default: the side to move) may play. All False once over."""
        n = self.size * self.size
        mask = np.zeros(n + (1 if include_pass else 0), dtype=bool)
        if self.is_over:
            return mask
        c = self.to_move if color is None else color
        ko = self.ko if self.ko is not None and c == self._ko_color else -1
        mask[:n] = legal_points(self.cell_values(), neighbour_table(self.size), c, ko)
        if include_pass:
            mask[n] = True
        return mask

    def cell_values(self) -> np.ndarray:
        """The cells as a read-only uint8 [size * size] view (no copy): what the compiled scans
        and other array code read."""
        return np.frombuffer(self.cells, dtype=np.uint8)

    def area(self) -> tuple[int, int]:
        """(Black, White) area: stones plus empty regions bordered by that colour only."""
        size, cells, nbrs = self.size, self.cells, neighbours(self.size)
        counts = [0, cells.count(BLACK), cells.count(WHITE)]
        seen = bytearray(size * size)
        for start in range(size * size):
            if cells[start] != EMPTY or seen[start]:
                continue
            region = [start]
            seen[start] = 1
            border = 0  # bit 1: touches black, bit 2: touches white
            i = 0
            while i < len(region):
                for q in nbrs[region[i]]:
                    v = cells[q]
                    if v == EMPTY:
                        if not seen[q]:
                            seen[q] = 1
                            region.append(q)
                    else:
                        border |= v
                i += 1
            if border in (BLACK, WHITE):
                counts[border] += len(region)
        return counts[BLACK], counts[WHITE]

    def score(self, komi: float = 0.0) -> float:
        """Area score from Black's side: Black area - White area - komi (> 0: Black wins)."""
        black, white = self.area()
        return black - white - komi

    def ascii(self) -> str:
        """The board as text, top row first, GTP column letters; the last move in lower case."""
        glyph = {EMPTY: ".", BLACK: "X", WHITE: "O"}
        last = self.last_moves[-1] if self.last_moves else None
        lines = []
        for y in range(self.size - 1, -1, -1):
            row = []
            for x in range(self.size):
                p = y * self.size + x
                g = glyph[self.cells[p]]
                row.append(g.lower() if p == last else g)
            lines.append(f"{y + 1:>2} " + " ".join(row))
        lines.append("   " + " ".join(GTP_LETTERS[: self.size]))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"GoState(size={self.size}, move_number={self.move_number}, "
                f"to_move={self.to_move}, ko={self.ko}, passes={self.passes})")


# ---- replaying records ----------------------------------------------------------------------
class GameRecord(Protocol):
    """What `replay` needs from a record (services.records.sgf.SgfGame fits)."""

    size: int
    setup_black: tuple[int, ...]
    setup_white: tuple[int, ...]
    moves: tuple[tuple[int, int | None], ...]
    player_to_move: int | None


class Replay(NamedTuple):
    """states[0] is the position after set-up, states[i + 1] the one after moves[i]; when a
    move is illegal the replay stops there: `error` says which and why, and `played` counts
    the moves that were applied. `resumed` counts plays that went on after two passes."""

    states: list[GoState]
    error: str | None
    played: int
    resumed: int


def replay(game: GameRecord, allow_resume: bool = True, keep_states: bool = True) -> Replay:
    """Replay a record's main line. Never raises on bad records: an illegal move (or set-up,
    or an unsupported board size) ends the replay and is reported in `error`.

    `allow_resume`: a move after two consecutive passes resumes play (KGS records do this
    when the players disagree about dead stones); False reports it as 'game over'.
    `keep_states`: False keeps only the first and the last state (for counting and speed).
    """
    if not MIN_SIZE <= game.size <= MAX_SIZE:
        return Replay([], f"board size {game.size} is not supported", 0, 0)
    first = game.moves[0][0] if game.moves else BLACK
    to_move = game.player_to_move or first
    state = GoState(game.size, to_move)
    try:
        if game.setup_black or game.setup_white:
            state = state.add_stones(game.setup_black, game.setup_white, to_move=to_move)
    except IllegalMove as exc:
        return Replay([state], f"set-up: {exc}", 0, 0)
    states = [state]
    resumed = 0
    error = None
    played = 0
    for color, point in game.moves:
        if state.passes >= 2 and allow_resume:
            state = state.resume()
            resumed += 1
        try:
            state = state.play(point, color)
        except IllegalMove as exc:
            who = "B" if color == BLACK else "W"
            error = f"move {played + 1} ({who} {point_name(point, game.size)}): {exc}"
            break
        played += 1
        if keep_states:
            states.append(state)
    if not keep_states and played:
        states.append(state)
    return Replay(states, error, played, resumed)
