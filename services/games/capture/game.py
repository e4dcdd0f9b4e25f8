"""The Capture Game (Atari-Go) as a `Game` (services.games.base), on 5x5 to 9x9 boards.

The rules, as PyBrain's ``CaptureGame`` (the implementation Grüttner et al. trained and
evaluated with, default ``suicideenabled=True``):

* Go stones and liberties on an empty S x S board, black first, the players alternate; there
  is no pass and no set-up.
* The first capture wins: a stone that leaves an opponent group without liberties ends the
  game, won by its player.
* Suicide is a legal move that loses at once: a stone that captures nothing and leaves its own
  group without liberties ends the game, won by the opponent. PyBrain's network player chooses
  among all empty points (``getLegals``) and loses by its own suicide; forbidding suicide
  instead would change the game the paper's fitness numbers were measured on, and hand a
  trained network a rule it never saw.
* So every empty point is a legal move, and the side to move always has one: in a game that
  goes on every group has a liberty, and when one empty point is left every group touches it,
  so a stone there captures the opponent's (which exist once both have moved). A game ends
  within S*S moves, by a capture or a suicide; there is no draw and no "no legal move". No
  ko arises either (the first capture ends the game).
* A finished game's board shows the last stone as played; nothing is removed.

What the services ask: the network input is the int8 board [S, S] (0 empty, 1 black, 2
white; the side to move is black exactly when both have as many stones); the policy has S*S
entries (no pass); moves are named as Gomoku's (``c3``: column letter, row from the bottom).
Requests (`position_from_request`) must name a served size (5..9), no rule, komi, set-up
stones or first mover, and moves on empty points of a game that goes on; a move that is
suicide is refused naming it (it would end the game), and a position whose game is over (a
capture) is refused by `require_playable`, so Predict and GenMove get INVALID_ARGUMENT for
both. The search (`expand`) sees a capture as a proven win and leaves suicide out of the
candidates unless nothing else is left. So Predict's policy covers every empty point, a suicide
included (legal, and losing: the network is asked about it as PyBrain's player was), while
GenMove plays a capture when there is one and a suicide only when nothing else is left.

Served as Triton's ``capture_policy`` (`default_model`; model_repository/capture_policy): an
MDRNN or MDLSTM (`default_config` ``capture_mdlstm_k2``, the paper's 52-weight network; its
weights come from direct policy search, not from game records) behind the int8 board (the
configurations' serving wrapper, `services.models.mdrnn.CapturePolicy`), published as every
game's networks are (`services.trainer.publish`). Games are written as SGF (GM[1], SZ, RU
`RULES_NAME`; `record_text`) and played against the paper's greedy player (`opponent`) by
``movepred play --game capture``. Its record files are ``*.capture.sgf`` (`RECORD_SUFFIX`:
longer than Go's ``.sgf``, so the ingest gives them to this game), replayed into training
pairs by `services.games.capture.replay` (`replay_source`): self-play writes them and the
ingest reads them back, so the self-play loop runs this game too.
The rules themselves are `services.games.capture.batch`'s kernels, the ones training play runs
on, imported when a position is first played (the registry imports this module in every
process; numba is loaded only where the game is played).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from services.api.movepred.v1 import search_pb2
from services.games.base import (
    BLACK,
    COLOR_NAMES,
    WHITE,
    Expansion,
    Game,
    InvalidRequest,
    Position,
    SourceResult,
    check_size,
    simple_position,
)
from services.games.capture.records import RECORD_SUFFIX, RULES_NAME
from services.games.registry import register
from services.games.search_kernels import SearchKernels, SearchPosition
from services.records.sgf_writer import APP_NAME, app_version, sgf_point, sgf_record

EMPTY = 0
MIN_SIZE, MAX_SIZE = 5, 9  # the sizes served: the paper's 5x5 and 7x7, and up to 9x9
DEFAULT_SIZE = 5
# the last move's effect (`capture_batch.play`'s values)
GOES_ON, CAPTURED, SUICIDE = 0, 1, -1


@cache
def _engine() -> ModuleType:
    """`services.games.capture.batch`, imported on first use (see the module docstring)."""
    from services.games.capture import batch as capture_batch

    return capture_batch


class CaptureState:
    """An immutable Capture Game position: the flat board, the moves, the last move's effect."""

    __slots__ = ("_cells", "moves", "result", "size")

    def __init__(self, size: int, cells: np.ndarray | None = None, moves: tuple[int, ...] = (),
                 result: int = GOES_ON) -> None:
        self.size = size
        if cells is None:
            cells = np.zeros(size * size, np.int8)
        cells.flags.writeable = False
        self._cells = cells
        self.moves = moves
        self.result = result

    @property
    def game(self) -> CaptureGame:
        return CAPTURE

    @property
    def to_move(self) -> int:
        return BLACK if len(self.moves) % 2 == 0 else WHITE

    @property
    def board(self) -> np.ndarray:
        """int8 [S, S] indexed [y, x] (read-only)."""
        return self._cells.reshape(self.size, self.size)

    @property
    def is_over(self) -> bool:
        return self.result != GOES_ON

    @property
    def winner(self) -> int:
        """BLACK or WHITE once the game is over, EMPTY while it goes on."""
        if self.result == GOES_ON:
            return EMPTY
        last = WHITE if self.to_move == BLACK else BLACK
        return last if self.result == CAPTURED else self.to_move

    def play(self, move: int) -> CaptureState:
        """Place the side to move's stone on flat point `move`; ValueError when the game is
        over or the point is off the board or taken. A suicide is played (and loses)."""
        if self.is_over:
            raise ValueError("the game is over")
        if not 0 <= move < self.size * self.size:
            raise ValueError(f"point {move} is off the {self.size}x{self.size} board")
        if self._cells[move] != EMPTY:
            raise ValueError("occupied")
        cells = self._cells.copy().reshape(1, -1)
        result = int(_engine().play(cells, self.to_move, np.array([move]))[0])
        return CaptureState(self.size, cells.reshape(-1), (*self.moves, int(move)), result)

    def legal_mask(self) -> np.ndarray:
        """Boolean [S*S]: every empty point (none once the game is over)."""
        if self.is_over:
            return np.zeros(self.size * self.size, bool)
        return self._cells == EMPTY

    def move_kinds(self) -> tuple[list[int], list[int]]:
        """(the capturing moves, the suicides) of the side to move, ascending."""
        engine = _engine()
        n = self.size * self.size
        libs = engine.liberties(self._cells.reshape(1, -1))[0]
        nbrs = engine.neighbour_table(self.size)
        me, cells = self.to_move, self._cells
        captures, suicides = [], []
        for p in range(n):
            if cells[p] != EMPTY:
                continue
            around = [q for q in nbrs[p] if q >= 0]
            if any(cells[q] not in (EMPTY, me) and libs[q] == 1 for q in around):
                captures.append(p)
            elif not any(cells[q] == EMPTY or (cells[q] == me and libs[q] > 1) for q in around):
                suicides.append(p)
        return captures, suicides

    def __repr__(self) -> str:
        return (f"CaptureState(size={self.size}, moves={len(self.moves)}, "
                f"to_move={COLOR_NAMES[self.to_move]}, result={self.result})")


class CaptureGame(Game):
    name = "capture"
    title = "Capture Game"
    default_size = DEFAULT_SIZE
    sizes = tuple(range(MIN_SIZE, MAX_SIZE + 1))
    default_model = "capture_policy"
    default_config = "capture_mdlstm_k2"
    # the paper's networks are trained by the policy search, the self-play loop's by gradient
    selfplay_config = "capture_res_b2c32_v"
    record_formats = (RECORD_SUFFIX,)
    # `.sgf` first: what `movepred play --out` writes and viewers open; `RECORD_SUFFIX` the
    # same text under the name the ingest reads (what self-play writes: `record_suffix`)
    written_formats = (".sgf", RECORD_SUFFIX)
    stages = (4, 16)  # 5x5 games last about 15 moves

    def start(self, size: int | None = None) -> CaptureState:
        return CaptureState(size or DEFAULT_SIZE)

    def terminal_value(self, state: Position) -> float:
        """+1 to the player who captured, -1 to the one whose stone was suicide."""
        s: Any = state
        return 1.0 if s.result == CAPTURED else -1.0

    def search_kernels(self) -> SearchKernels:
        """`services.games.capture.search_kernels` (numba: imported on first search)."""
        from services.games.capture import search_kernels

        return search_kernels.KERNELS

    def search_position(self, state: Position) -> SearchPosition:
        from services.games.capture import search_kernels

        return search_kernels.position(state)

    def expand(self, state: Position) -> Expansion:
        """Over: its value to the last mover. A capture available: a proven win, searched
        alone. Otherwise every move but the suicides (all of them when nothing else is left)."""
        s: Any = state
        if s.is_over:
            return Expansion(terminal_value=self.terminal_value(s))
        legal = s.legal_mask()
        captures, suicides = s.move_kinds()
        if captures:
            return Expansion(candidates=captures, proven_win=True)
        quiet = legal.copy()
        quiet[suicides] = False
        return Expansion(candidates=np.flatnonzero(quiet if quiet.any() else legal).tolist(),
                         legal=legal)

    def tactical_positions(self) -> dict[str, tuple[np.ndarray, tuple[int, ...]]]:
        """Black to move captures the white stone in atari at b2 by playing b3."""
        s = self.start()
        for name in ("b1", "b2", "a2", "e5", "c2", "e4"):  # black b1, white b2, black a2, ...
            s = s.play(self.parse_move(name, s.size))
        return {"capture in one": (s.board.copy(), (self.parse_move("b3", s.size),))}

    def record_text(self, suffix: str, moves: Sequence[int], size: int, *,
                    rule: str | None = None, comments: Sequence[str] = (),
                    summary: str = "", komi: float | None = None, players: str = "",
                    result: str | None = None) -> str:
        """SGF (GM[1]: Go stones; SZ; RU `RULES_NAME` and GN name the game, whose rules SGF
        defines no RU value for) for `.sgf` and `RECORD_SUFFIX` alike: the moves replayed
        here, RE the winner when the game ended (a capture or a suicide), `summary` as GC.
        ValueError for a move the rules refuse."""
        if suffix not in self.written_formats:
            return super().record_text(suffix, moves, size)
        state = self.start(size)
        for i, move in enumerate(moves):
            try:
                state = state.play(int(move))
            except ValueError as exc:
                raise ValueError(f"moves[{i}]: {self.move_name(int(move), size)}: {exc}") from exc
        root = [("FF", "4"), ("GM", "1"), ("CA", "UTF-8"), ("AP", f"{APP_NAME}:{app_version()}"),
                ("SZ", str(size)), ("RU", RULES_NAME),
                ("GN", f"{self.title} (the first capture wins)")]
        root += [(key, players) for key in ("PB", "PW") if players]
        if state.is_over:
            root.append(("RE", "B+" if state.winner == BLACK else "W+"))
        elif result is not None:
            root.append(("RE", result))
        if summary:
            root.append(("GC", summary))
        return sgf_record(root, [("B" if i % 2 == 0 else "W", sgf_point(int(m), size),
                                  comments[i] if i < len(comments) else None)
                                 for i, m in enumerate(moves)])

    def replay_source(self, path: Path, result: SourceResult, *,
                      board_size: int | None = None, packed: bool = True) -> Iterator[Any]:
        """A `RECORD_SUFFIX` file's games replayed by the rules, malformed ones quarantined
        with their reason: `services.games.capture.replay`. The game has no packed board
        encoding (`packed` changes nothing: boards are the S x S cells)."""
        from services.games.capture import replay  # pyarrow: ingest only, not the rules

        return replay.replay_source(self, Path(path), result, board_size=board_size)

    def opponent(self, seed: int = 0) -> Callable[[Position], int]:
        """The paper's greedy player (`capture_batch.greedy_moves`: capture, else save a
        group in atari, else maximise p - q), its ties broken by a generator seeded `seed`."""
        engine = _engine()
        rng = np.random.default_rng(seed)

        def greedy_player(state: Position) -> int:
            cells = np.ascontiguousarray(state.board.reshape(1, -1), dtype=np.int8).copy()
            return int(engine.greedy_moves(cells, state.to_move, rng.random(1))[0])

        return greedy_player

    def require_playable(self, state: Position, field: str) -> None:
        s: Any = state
        if s.is_over:
            how = "captured" if s.result == CAPTURED else "committed suicide"
            raise InvalidRequest(field, f"the game is over: {COLOR_NAMES[s.winner]} won "
                                        f"({COLOR_NAMES[3 - s.to_move]} {how} at "
                                        f"{self.move_name(s.moves[-1], s.size)})")

    def position_from_request(self, position: search_pb2.Position,
                              field: str) -> CaptureState:
        """A validated position (which may be a game won by a capture); a suicide among the
        moves is refused, naming it."""
        size = check_size(self, position, field)
        state: Any = simple_position(self, position, field, self.start(size))
        if state.result == SUICIDE:
            move = state.moves[-1]
            raise InvalidRequest(
                f"{field}.moves[{len(state.moves) - 1}]",
                f"{self.move_name(move, size)} is suicide for {COLOR_NAMES[3 - state.to_move]} "
                "(it leaves its own group without liberties, which loses the Capture Game)")
        return state


CAPTURE = register(CaptureGame())
