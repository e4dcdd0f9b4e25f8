"""Gomoku/Renju as a `Game` (services.games.base): what the platform asks of it.

The rules are `services.games.gomoku.rules` (and `renju`); this module adds what the search service
needs: request validation (`position_from_request`, with a fast path that places the moves
without replaying them when no rule can refuse one), the search's tactical exactness (`expand`:
a side that can make five searches only its winning points, a side facing a four only its
blocks) and the tree cache's key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from services import coords
from services.api.movepred.v1 import search_pb2
from services.games.base import (
    COLOR_NAMES,
    BoardNotes,
    Expansion,
    Game,
    InvalidRequest,
    Position,
    RequestTooLarge,
    SourceResult,
    setup_points,
)
from services.games.gomoku import renju
from services.games.gomoku.rollout import GomokuRollouts
from services.games.gomoku.rules import (
    BLACK,
    CUT_NOTE,
    DEFAULT_SIZE,
    EMPTY,
    FORBIDDEN_CUT,
    FOUR_SUM,
    GAME_NAME,
    WHITE,
    GomokuState,
    IllegalMove,
    Rule,
    five_windows,
    has_five,
    makes_five,
    opponent,
    window_sums,
)
from services.games.registry import register
from services.games.search_kernels import SearchKernels, SearchPosition
from services.records.rif import RIF_SUFFIXES, RifGame
from services.records.sgf_writer import game_to_sgf

# API rule values -> rules (RULE_UNSPECIFIED: freestyle)
RULES = {
    search_pb2.RULE_UNSPECIFIED: Rule.FREESTYLE,
    search_pb2.RULE_FREESTYLE: Rule.FREESTYLE,
    search_pb2.RULE_STANDARD: Rule.STANDARD,
    search_pb2.RULE_RENJU: Rule.RENJU,
}
# black's forbidden-point checks make a renju move about three times dearer to replay
RENJU_MOVE_COST = 3


def winning_points(state: GomokuState, color: int, sums: np.ndarray | None = None) -> list[int]:
    """Empty points where `color` makes five at once, ascending.

    Same answer as `GomokuState.winning_points`, but fast: a five through a point needs a window
    of five cells holding four stones of `color` and that empty point, so only those candidates
    are checked with the rules' own `makes_five` (which knows about overlines). `sums`: the
    board's window sums, when the caller has them already.
    """
    if sums is None:
        sums = window_sums(state.board)
    hit = sums == FOUR_SUM[color]
    if not hit.any():
        return []
    windows = five_windows(state.size)[hit]
    candidates = np.unique(windows[state.board.reshape(-1)[windows] == EMPTY])
    size, board, rule = state.size, state.board, state.rule
    return [int(p) for p in candidates if makes_five(board, p % size, p // size, color, rule)]


class GomokuGame(Game):
    name = GAME_NAME
    title = "Gomoku"
    proto_game = search_pb2.GAME_GOMOKU
    default_size = DEFAULT_SIZE
    sizes = (DEFAULT_SIZE,)  # the Gomoku model's input is fixed at 15x15
    default_model = "gomoku_policy"
    default_config = "shao_f32_n2_v"
    record_formats = RIF_SUFFIXES
    written_formats = (".sgf", ".rif")
    stages = (10, 100)  # 10-move bands, every ply past 100 in one
    rule_names = tuple(r.value for r in Rule)  # freestyle (the default), standard, renju
    sgf_game_type = "4"
    # renju games cut at a forbidden black move
    kept_notes: ClassVar[dict[str, str]] = {CUT_NOTE: FORBIDDEN_CUT}

    def replay_source(self, path: Path, result: SourceResult, *,
                      board_size: int | None = None, packed: bool = True) -> Iterator[Any]:
        """A RenjuNet file's games replayed, each under its own rule (renju unless the record
        names a Gomoku one): `services.games.gomoku.replay`. Boards are stored as they are
        (no packed encoding); every record is 15x15."""
        from services.games.gomoku import (
            replay as gomoku_replay,  # pyarrow: ingest only, not the rules
        )

        if board_size not in (None, DEFAULT_SIZE):
            raise ValueError(f"{self.title} records are {DEFAULT_SIZE}x{DEFAULT_SIZE}, "
                             f"not {board_size}x{board_size}")
        return gomoku_replay.replay_source(Path(path), result)

    def expand_planes(self, boards):
        """[N, S, S] cells -> black, white and empty one-hot planes (`encoding`)."""
        from services.games import encoding  # torch: imported by the trainers, not the rules

        return encoding.planes_torch(boards)

    def record_text(self, suffix: str, moves: Sequence[int], size: int, *,
                    rule: str | None = None, comments: Sequence[str] = (),
                    summary: str = "", komi: float | None = None, players: str = "",
                    result: str | None = None) -> str:
        """SGF (GM[4], the rule in RU) or RenjuNet RIF (the move comments, which RIF has no
        place for, go into the database comment after `summary`)."""
        if suffix == ".sgf":
            named = {"black": players, "white": players} if players else {}
            return game_to_sgf(moves, size=size, rule=rule or Rule.FREESTYLE, result=result,
                               comments=dict(enumerate(comments)), game_comment=summary or None,
                               **named)
        if suffix == ".rif":
            from services.records.rif_writer import rif_text

            comment = "; ".join(x for x in (summary, " ".join(comments)) if x)
            game = RifGame(source="", game_id="1", moves=tuple(int(p) for p in moves),
                           rule=Rule(rule or Rule.FREESTYLE).value)
            return rif_text([game], comment=comment or None)
        return super().record_text(suffix, moves, size)

    def proto_rule(self, name: str) -> int:
        """The API rule of a rule name: "freestyle" -> search_pb2.RULE_FREESTYLE, ... ("":
        unset)."""
        if name in self.rule_names:
            return next(value for value, rule in RULES.items() if rule.value == name and value)
        return super().proto_rule(name)

    def board_notes(self, state: Position) -> BoardNotes:
        """Under renju, black's forbidden points (marked whoever is to move: they are what
        black must avoid), and the game's end."""
        s: Any = state
        forbidden = ({} if s.rule is not Rule.RENJU or s.is_over
                     else dict(renju.forbidden_points(s.board)))
        return BoardNotes(forbidden=forbidden, result=self.result_text(s))

    def terminal_value(self, state: Position) -> float:
        """A five is always made by the last mover: +1 to it; a full board is a draw."""
        s: Any = state
        return 1.0 if s.winner != EMPTY else 0.0

    def expand(self, state: Position) -> Expansion:
        """Proven outcomes from the rules: a five made (+1 to its maker), a full board (0), a
        side to move that can make five (only its winning points); facing a four, only the
        blocks (no legal block under renju: every legal move loses, all are searched)."""
        s: Any = state
        if s.winner != EMPTY:
            return Expansion(terminal_value=1.0)
        legal = s.legal_mask()
        if not legal.any():  # full board (or, under renju, only forbidden points): a draw
            return Expansion(terminal_value=0.0)
        sums = window_sums(s.board)
        wins = [p for p in winning_points(s, s.to_move, sums) if legal[p]]
        if wins:
            return Expansion(candidates=wins, proven_win=True)
        blocks = [p for p in winning_points(s, opponent(s.to_move), sums) if legal[p]]
        return Expansion(candidates=blocks or np.flatnonzero(legal).tolist(), legal=legal)

    def search_kernels(self) -> SearchKernels:
        """`services.games.gomoku.search_kernels` (numba: imported on first search)."""
        from services.games.gomoku import search_kernels

        return search_kernels.KERNELS

    def search_position(self, state: Position) -> SearchPosition:
        from services.games.gomoku import search_kernels

        s: Any = state
        return search_kernels.position(s)

    def start(self, size: int | None = None) -> GomokuState:
        return GomokuState(size=size or DEFAULT_SIZE)

    def rollouts(self, rule: str = "") -> GomokuRollouts:
        """Five-in-a-row rollouts under `rule` (freestyle by default)."""
        return GomokuRollouts(Rule(rule) if rule else Rule.FREESTYLE)

    def smoke_positions(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """`known_positions`, legal on their empty points."""
        return {name: (b, b.reshape(-1) == EMPTY) for name, b in known_positions().items()}

    def tactical_positions(self) -> dict[str, tuple[np.ndarray, tuple[int, ...]]]:
        return tactical_positions()

    def transposition_key(self, state: Position) -> tuple[bytes, int]:
        """The board and the winner: the rules (with the side to move, the number of moves)
        and the network input see nothing else of the history."""
        s: Any = state
        return (s.board.tobytes(), s.winner)

    def base_key(self, state: Position) -> tuple[Any, ...]:
        """Rule, size and the set-up stones (the board without the moves)."""
        s: Any = state
        board = s.board.reshape(-1).copy()
        board[list(s.moves)] = EMPTY
        return (str(s.rule), s.size, board.tobytes())

    def replay_cost(self, position: search_pb2.Position) -> int:
        n = super().replay_cost(position)
        return n * (RENJU_MOVE_COST if position.rule == search_pb2.RULE_RENJU else 1)

    def replay_cost_note(self) -> str:
        return f"a renju move counts {RENJU_MOVE_COST}"

    def require_playable(self, state: Position, field: str) -> None:
        s: Any = state
        if s.winner != EMPTY:
            raise InvalidRequest(field, f"the game is over ({COLOR_NAMES[s.winner]} made five)")
        if not s.legal_mask().any():
            if not (s.board == EMPTY).any():
                raise InvalidRequest(field, "the game is over (the board is full)")
            raise InvalidRequest(field, f"{COLOR_NAMES[s.to_move]} has no legal move")

    def position_from_request(self, position: search_pb2.Position, field: str) -> GomokuState:
        if position.rule == search_pb2.RULE_GO_AREA:
            raise InvalidRequest(f"{field}.rule",
                                 "RULE_GO_AREA is a Go rule; this is a Gomoku position")
        if position.HasField("komi"):
            raise InvalidRequest(f"{field}.komi", "only Go positions have a komi")
        if position.first_to_move not in (search_pb2.COLOR_UNSPECIFIED, search_pb2.COLOR_BLACK):
            raise InvalidRequest(f"{field}.first_to_move", "black moves first in Gomoku")
        if position.rule not in RULES:
            raise InvalidRequest(f"{field}.rule", f"unknown rule {position.rule}")
        rule = RULES[position.rule]
        size = self.request_size(position.board_size)
        if size not in self.sizes:
            raise InvalidRequest(
                f"{field}.board_size",
                f"the served model plays on {DEFAULT_SIZE}x{DEFAULT_SIZE} only, got {size}",
            )
        points = size * size
        for name in ("moves", "setup_black", "setup_white"):
            n = len(getattr(position, name))
            if n > points:
                raise RequestTooLarge(
                    f"{field}.{name}", f"at most {points} points on a {size}x{size} board, got {n}"
                )
        setup, black, white = _setup_stones(position, size, rule, field)
        if rule is not Rule.RENJU:  # no forbidden points: the moves can be placed without `play`
            fast = _placed_without_five(setup, position.moves, size, rule)
            if fast is not None:
                return fast
        state = GomokuState.from_moves(
            [], size=size, rule=rule, setup_black=tuple(black), setup_white=tuple(white)
        )
        for i, p in enumerate(position.moves):
            where = f"{field}.moves[{i}]"
            if p.is_pass:
                raise InvalidRequest(where, "a pass is a Go move; Gomoku has none")
            if not (0 <= p.x < size and 0 <= p.y < size):
                raise InvalidRequest(where, f"({p.x}, {p.y}) is off the {size}x{size} board")
            if state.winner != EMPTY:
                winner = COLOR_NAMES[state.winner]
                raise InvalidRequest(where,
                                     f"the game ended at moves[{i - 1}] ({winner} made five)")
            if state.board[p.y, p.x] != EMPTY:
                raise InvalidRequest(where, f"{coords.point_name(p.x, p.y)} is occupied")
            try:
                state = state.play(p.y * size + p.x)
            except IllegalMove as exc:  # e.g. a renju forbidden point for black
                raise InvalidRequest(where, str(exc)) from exc
        return state


def _setup_stones(
    position: search_pb2.Position, size: int, rule: Rule, field: str
) -> tuple[np.ndarray, list[int], list[int]]:
    """The board of the set-up stones, validated (on the board, on empty points, no five),
    and their flat indices (black, white)."""
    if not position.setup_black and not position.setup_white:  # the usual request
        return np.zeros((size, size), np.int8), [], []
    board = np.zeros((size, size), np.int8)
    taken: set[int] = set()

    def name(index: int) -> str:
        return coords.index_name(index, size)

    black = setup_points(position.setup_black, size, taken, f"{field}.setup_black", name)
    board.flat[black] = BLACK
    white = setup_points(position.setup_white, size, taken, f"{field}.setup_white", name)
    board.flat[white] = WHITE
    for color, stones, what in ((BLACK, black, "setup_black"), (WHITE, white, "setup_white")):
        for p in stones:
            if makes_five(board, p % size, p // size, color, rule):
                raise InvalidRequest(f"{field}.{what}", "the setup stones already make five")
    return board, black, white


def _placed_without_five(
    setup: np.ndarray, moves: Iterable[search_pb2.Point], size: int, rule: Rule
) -> GomokuState | None:
    """The state after `moves` on the `setup` board, built without replaying them one by one,
    when that gives exactly what `GomokuState.play` would (no forbidden points, i.e. not renju):
    every move is on the board and empty, and the final board has no five in a row of one
    colour, so no move can have made five (stones are never removed) and nobody has won.
    None when that does not hold: the caller replays the moves, which names the failing move."""
    board = setup.copy()
    flat = board.reshape(-1)
    played: list[int] = []
    color = BLACK
    for p in moves:
        if p.is_pass or not (0 <= p.x < size and 0 <= p.y < size):
            return None
        index = p.y * size + p.x
        if flat[index] != EMPTY:
            return None
        flat[index] = color
        played.append(index)
        color = WHITE if color == BLACK else BLACK
    if has_five(board):
        return None
    return GomokuState(size=size, rule=rule, board=board, moves=tuple(played), winner=EMPTY)


def _board(black: list[tuple[int, int]], white: list[tuple[int, int]]) -> np.ndarray:
    """An int8 [15, 15] board with those (x, y) stones."""
    board = np.zeros((DEFAULT_SIZE, DEFAULT_SIZE), dtype=np.int8)
    for x, y in black:
        board[y, x] = 1
    for x, y in white:
        board[y, x] = 2
    return board


def known_positions() -> dict[str, np.ndarray]:
    """Fixed positions ({name: int8 [15, 15]}, indexed [y, x]) the rollout smoke test asks a new
    version about (`GomokuGame.smoke_positions`)."""
    crowded = np.tile(np.array([1, 2, 2, 1], dtype=np.int8), DEFAULT_SIZE * DEFAULT_SIZE // 4 + 1)
    crowded = crowded[: DEFAULT_SIZE * DEFAULT_SIZE].reshape(DEFAULT_SIZE, DEFAULT_SIZE).copy()
    crowded[5:10, 5:10] = 0  # 25 empty points around the centre
    full = np.where(np.arange(DEFAULT_SIZE * DEFAULT_SIZE) % 2 == 0, 1, 2).astype(np.int8)
    full = full.reshape(DEFAULT_SIZE, DEFAULT_SIZE)
    full[0, 0] = 0  # one legal point left
    return {
        "empty": _board([], []),
        "centre stone": _board([(7, 7)], []),
        "opening": _board([(7, 7), (8, 7)], [(7, 8), (6, 6)]),
        # black to move: f8-i8 is an open four, e8 or j8 makes five
        "open four": _board([(5, 7), (6, 7), (7, 7), (8, 7)],
                            [(7, 8), (8, 8), (9, 8), (6, 9)]),
        "crowded": crowded,
        "one empty point": full,
    }


def tactical_positions() -> dict[str, tuple[np.ndarray, tuple[int, ...]]]:
    """Gomoku positions with a forced answer: {name: (int8 [15, 15] indexed [y, x], the right
    points y * 15 + x)}. Black moves when both sides have as many stones, else white. Each
    position holds no five; `tests/test_smoke_checks.py` checks every answer with the rules."""

    def at(x: int, y: int) -> int:
        return y * DEFAULT_SIZE + x

    return {
        # black to move: four f8-i8, e8 white, j8 makes five
        "take a five (row)": (_board([(5, 7), (6, 7), (7, 7), (8, 7)],
                                     [(4, 7), (7, 8), (8, 9), (3, 3)]), (at(9, 7),)),
        # white to move: g5 g6 _ g8 g9, g7 fills the gap
        "take a five (broken column)": (_board([(7, 7), (8, 8), (9, 9), (5, 5), (10, 3)],
                                               [(6, 4), (6, 5), (6, 7), (6, 8)]),
                                        (at(6, 6),)),
        # black to move, both sides have four: black wins at h8 (c3 is white) before blocking
        "take a five, not block": (_board([(3, 3), (4, 4), (5, 5), (6, 6), (12, 1)],
                                          [(10, 10), (10, 11), (10, 12), (10, 13), (2, 2)]),
                                   (at(7, 7),)),
        # black to move: white four j6-j9 closed at j10 by black, j5 blocks
        "block a four (column)": (_board([(8, 9), (7, 7), (6, 6), (11, 2)],
                                         [(8, 5), (8, 6), (8, 7), (8, 8)]), (at(8, 4),)),
        # white to move: black four k5-h8 on the anti-diagonal, l4 white, g9 blocks
        "block a four (diagonal)": (_board([(10, 4), (9, 5), (8, 6), (7, 7), (3, 12)],
                                           [(11, 3), (7, 8), (2, 2), (12, 12)]), (at(6, 8),)),
        # black to move: white c12 d12 _ f12 g12, e12 blocks
        "block a broken four": (_board([(7, 7), (8, 8), (6, 8), (9, 2)],
                                       [(2, 11), (3, 11), (5, 11), (6, 11)]), (at(4, 11),)),
    }


GOMOKU = register(GomokuGame())
