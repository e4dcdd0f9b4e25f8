"""Capture Game records (SGF, `RECORD_SUFFIX`) replayed into the ingest's raw training pairs.

A Capture Game record is SGF with Go stones (GM[1], or no GM), the board in SZ (5..9) and the
game's rules named in RU (`RULES_NAME`; a record without RU is taken as the Capture Game's,
since its file suffix already says so). Its main line is replayed by the game's own rules
(`Position.play`), so a record the rules refuse gives no pair. Quarantined, each with its
reason, are:

* what the SGF reader rejects (a damaged tree, another GM, a board outside SGF's sizes);
* RU naming other rules (a Go record under a Capture Game name);
* a board size the game is not played on, or another than the dataset's (`board_size`);
* set-up stones (AB/AW: the game starts from the empty board), a pass (the game has none),
  colours that do not alternate from black;
* an illegal move (off the board, on a stone) or a move after the game ended (the first
  capture or a suicide ends it);
* a result (RE) that names another winner than the rules' for a game they ended.

Every position before a move is one pair, in its canonical symmetry image
(`services.games.pair_tables`; the rules are the same under the board's eight symmetries),
with the mover's result of the game: from the rules when they ended it, else from RE (a
resignation, a game stopped and scored), else unknown (NaN). The game has no packed board
encoding: boards are stored as the network input, the S x S cells, either way. It has no rule
options: the `rule` column is empty.

Here, apart from `game`, because it imports pyarrow: the ingest's, not the rules'.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from services.games.base import (
    BLACK,
    WHITE,
    Game,
    Position,
    SourceResult,
    quarantine_row,
    served_sizes,
)
from services.games.capture.records import RULES_NAME
from services.games.pair_tables import pairs_table
from services.records.sgf import GO_GAME_TYPES, SgfGame, SgfRejected, read_sgf

# games replayed before their pairs are yielded as one table (bounds the memory a file takes)
GAMES_PER_TABLE = 4096
_COLOUR = {BLACK: "black", WHITE: "white"}


class RecordRefused(ValueError):
    """A record that gives no pairs; the message is its quarantine reason."""


def _record_rows(game: Game, record: SgfGame,
                 board_size: int | None) -> tuple[list[tuple], float]:
    """(board, move, mover, ply) of every position of `record` before a move, and Black's
    result (1, 0, 0.5, NaN unknown); RecordRefused with the reason it cannot be ingested."""
    rules = record.rules.strip()
    if rules and rules.lower() != RULES_NAME.lower():
        raise RecordRefused(f"rules {rules!r} are not the {game.title}'s (RU[{RULES_NAME}])")
    size = record.size
    if size not in game.sizes:
        raise RecordRefused(f"board size {size}: the {game.title} is played on "
                            f"{served_sizes(game)}")
    if board_size is not None and size != board_size:
        raise RecordRefused(f"board size {size} (this dataset holds {board_size}x{board_size} "
                            "games)")
    if record.setup_black or record.setup_white:
        raise RecordRefused(f"set-up stones (AB/AW): the {game.title} starts from the "
                            "empty board")
    state, rows = game.start(size), []
    for ply, (colour, point) in enumerate(record.moves):
        where = f"move {ply + 1}"
        if point is None:
            raise RecordRefused(f"{where} is a pass, which the {game.title} has not")
        if colour != state.to_move:
            raise RecordRefused(f"{where} is {_COLOUR.get(colour, colour)}'s: the colours "
                                "alternate from black")
        if state.is_over:
            raise RecordRefused(f"{where} ({game.move_name(point, size)}) comes after the "
                                f"game ended at move {ply}")
        board = state.board.copy()
        try:
            state = state.play(point)
        except ValueError as exc:
            raise RecordRefused(f"illegal {where} ({game.move_name(point, size)}): "
                                f"{exc}") from exc
        rows.append((board, point, colour, ply))
    return rows, _black_result(game, record, state)


def _snippet(game: Game, record: SgfGame) -> str:
    """The start of a record's moves for the quarantine table, in the game's notation where
    its board is one the game is played on (else as flat points)."""
    served = record.size in game.sizes

    def name(point: int | None) -> str:
        if point is None:
            return "pass"
        return game.move_name(point, record.size) if served else str(point)

    return " ".join(name(p) for _, p in record.moves[:40])


def _black_result(game: Game, record: SgfGame, state: Position) -> float:
    """Black's result: the rules' for a game they ended (RE must agree), else RE's."""
    if state.is_over:
        last = WHITE if state.to_move == BLACK else BLACK  # the last mover: captured or not
        winner = last if game.terminal_value(state) > 0 else BLACK + WHITE - last
        if record.winner in (BLACK, WHITE) and record.winner != winner:
            raise RecordRefused(f"RE[{record.result_raw}] names {_COLOUR[record.winner]}, but "
                                f"{_COLOUR[winner]} won by the rules")
        return 1.0 if winner == BLACK else 0.0
    if record.winner in (BLACK, WHITE):
        return 1.0 if record.winner == BLACK else 0.0
    return 0.5 if record.winner == 0 else float("nan")


class _Batch:
    """The pairs of the games replayed so far, by board size."""

    def __init__(self) -> None:
        self.by_size: dict[int, tuple[list, ...]] = {}
        self.games = 0

    def add(self, size: int, game_id: str, rows: list[tuple], black: float) -> None:
        columns = self.by_size.setdefault(size, ([], [], [], [], [], []))
        boards, moves, movers, plies, results, ids = columns
        for board, move, mover, ply in rows:
            boards.append(board)
            moves.append(move)
            movers.append(mover)
            plies.append(ply)
            results.append(black if mover == BLACK else 1.0 - black)
            ids.append(game_id)
        self.games += 1

    def tables(self, source: str) -> Iterator[pa.Table]:
        for size, (boards, moves, movers, plies, results, ids) in sorted(self.by_size.items()):
            yield _table(size, boards, moves, movers, plies, results, ids, source)
        self.by_size.clear()
        self.games = 0


def _table(size: int, boards: list, moves: list, movers: list, plies: list, results: list,
           ids: list[str], source: str) -> pa.Table:
    table = pairs_table(np.array(boards, np.int8).reshape(-1, size, size),
                        np.array(moves, np.int64), np.array(movers, np.int8),
                        np.array(plies, np.int64), ids, source,
                        np.array(results, np.float32), size=size)
    return table.append_column("rule", pa.array([""] * len(ids), pa.string()))


def replay_source(game: Game, path: Path, result: SourceResult, *,
                  board_size: int | None = None) -> Iterator[pa.Table]:
    """`CaptureGame.replay_source` (`game`, passed in: this module is imported by it): the
    pairs of every game of the SGF file `path`, a table per board size and `GAMES_PER_TABLE`
    games (at least one table), counted into `result`."""
    batch = _Batch()
    yielded = False
    for record in read_sgf(Path(path), source=result.source, game_types=GO_GAME_TYPES):
        result.read += 1
        if isinstance(record, SgfRejected):
            result.quarantine.append(quarantine_row(result.source, record.record_id,
                                                    record.reason, record.snippet))
            continue
        try:
            rows, black = _record_rows(game, record, board_size)
        except RecordRefused as exc:
            result.quarantine.append(quarantine_row(result.source, f"game {record.game_index}",
                                                    str(exc), _snippet(game, record)))
            continue
        result.ingested += 1
        batch.add(record.size, f"{result.source}#{record.game_index}", rows, black)
        if batch.games >= GAMES_PER_TABLE:
            for table in batch.tables(result.source):
                yielded = True
                yield table
    for table in batch.tables(result.source):
        yielded = True
        yield table
    if not yielded:
        size = board_size or game.default_size
        yield _table(size, [], [], [], [], [], [], result.source)


__all__ = ["GAMES_PER_TABLE", "RecordRefused", "replay_source"]
