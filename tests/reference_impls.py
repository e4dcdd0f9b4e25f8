"""Simple reference implementations the fast production code is checked against.

Each one computes what a production function computes, the plain way: per game, per image,
per token. The equivalence tests (and benchmarks/ingest.py, benchmarks/sgf_parse.py, which
show what the fast paths buy) compare the production results with these, value for value.
They live with the tests because nothing in production calls them.

* `canonicalize_reference`: all 8 symmetry images of each board materialised, hashed and
  lexsorted (`services.games.canonical.canonicalize` / `canonical_pairs`).
* `source_pairs_reference`, `pairs_table_reference`: one `replay` per game, one Python bytes
  object per board (`services.games.gomoku.replay.source_pairs` / `pairs_table`).
* `deduplicate_reference`: Arrow's group_by on (board, move) (`build.deduplicate`, row for
  row up to order; it also accepts tables `deduplicate` refuses).
* `sgf_token_by_token`: `read_sgf` with the main-line fast path switched off, every token
  through the general parser (`services.records.sgf`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from services.dataset.splits import split_of
from services.games.base import SourceResult, quarantine_row
from services.games.canonical import zobrist
from services.games.gomoku.replay import BOARD_SIZE, _move_snippet, replay
from services.games.gomoku.rules import CUT_NOTE, game_rule
from services.games.symmetry import N_SYMMETRIES, point_table
from services.records import sgf
from services.records.rif import Rejected, RifGame


def canonicalize_reference(boards: np.ndarray, moves: np.ndarray, size: int):
    """(canonical boards, moves, hashes): all 8 images materialised, hashed and lexsorted."""
    table = point_table(size)
    n = len(boards)
    images = np.empty((N_SYMMETRIES, n, size * size), dtype=np.int8)
    hashes = np.empty((N_SYMMETRIES, n), dtype=np.uint64)
    image_moves = np.empty((N_SYMMETRIES, n), dtype=np.int16)
    for k in range(N_SYMMETRIES):
        images[k][:, table[k]] = boards
        hashes[k] = zobrist(images[k], size)
        image_moves[k] = table[k][moves]
    # lexsort's last key is primary: smallest hash, then smallest move, then smallest k.
    order = np.lexsort((np.arange(N_SYMMETRIES)[:, None].repeat(n, 1), image_moves, hashes), axis=0)
    best = order[0]
    cols = np.arange(n)
    return images[best, cols], image_moves[best, cols], hashes[best, cols]


def source_pairs_reference(source: str, records: Iterable[RifGame | Rejected]) -> SourceResult:
    """`source_pairs` one game at a time: `replay` per game, boards concatenated."""
    boards, moves, to_move, plies, game_ids, results = [], [], [], [], [], []
    result = SourceResult(source=source, pairs=pa.table({}))
    for record in records:
        result.read += 1
        if isinstance(record, Rejected):
            result.quarantine.append(
                quarantine_row(source, record.record_id, record.reason, record.snippet))
            continue
        game = replay(record.moves, BOARD_SIZE, game_rule(record.rule))
        if game.error is not None:
            result.quarantine.append(quarantine_row(source, record.game_id, game.error,
                                                    _move_snippet(record.moves)))
            continue
        if game.cut is not None:
            result.note(CUT_NOTE)
            result.quarantine.append(quarantine_row(source, record.game_id, game.cut,
                                                    _move_snippet(record.moves)))
        result.ingested += 1
        boards.append(game.boards)
        moves.append(game.moves)
        to_move.append(game.to_move)
        plies.append(game.plies)
        game_ids.extend([record.game_id] * len(game.moves))
        bresult = np.nan if record.bresult is None else record.bresult
        results.extend(bresult if ply % 2 == 0 else 1 - bresult for ply in game.plies.tolist())
    if boards:
        result.pairs = pairs_table_reference(
            np.concatenate(boards), np.concatenate(moves), np.concatenate(to_move),
            np.concatenate(plies), game_ids, source, results)
    else:
        result.pairs = pairs_table_reference(
            np.zeros((0, BOARD_SIZE**2), np.int8), np.zeros(0, np.int16), np.zeros(0, np.int8),
            np.zeros(0, np.int16), [], source, [])
    return result


def pairs_table_reference(boards: np.ndarray, moves: np.ndarray, to_move: np.ndarray,
                          plies: np.ndarray, game_ids: list[str], source: str,
                          results: list[float] | None = None) -> pa.Table:
    """`pairs_table` with `canonicalize_reference` and one bytes object per board."""
    cb, cm, h = canonicalize_reference(boards, moves, BOARD_SIZE)
    n = len(cm)
    board_col = pa.array([row.tobytes() for row in cb], type=pa.binary())
    return pa.table({
        "board": board_col,
        "move": pa.array(cm, pa.int16()),
        "board_size": pa.array(np.full(n, BOARD_SIZE, np.int8)),
        "to_move": pa.array(to_move.astype(np.int8)),
        "ply": pa.array(plies.astype(np.int16)),
        "count": pa.array(np.ones(n, np.int32)),
        "position_hash": pa.array(h, pa.uint64()),
        "result": pa.array(np.full(n, np.nan, np.float32) if results is None
                           else np.asarray(results, np.float32), pa.float32()),
        "game_id": pa.array(game_ids, pa.string()),
        "source": pa.array([source] * n, pa.string()),
    })


def deduplicate_reference(tables: list[pa.Table]) -> pa.Table:
    """`deduplicate` as an Arrow group_by on (board, move), splits from the minimum hash."""
    table = pa.concat_tables(tables)
    aggregates = [("board_size", "min"), ("to_move", "min"), ("ply", "min"), ("count", "sum"),
                  ("position_hash", "min"), ("game_id", "min"), ("source", "min")]
    if "result" in table.column_names:  # NaN (unknown) -> null: the mean skips them
        r = table["result"]
        table = table.set_column(table.column_names.index("result"), "result", pc.if_else(
            pc.is_nan(r), pa.scalar(None, r.type), r))
        aggregates.append(("result", "mean"))
    grouped = table.group_by(["board", "move"], use_threads=False).aggregate(aggregates)
    grouped = grouped.rename_columns({f"{c}_{op}": c for c, op in aggregates})
    if "result" in grouped.column_names:  # mean gives float64, null where none is known
        mean = grouped["result"].to_numpy(zero_copy_only=False).astype(np.float32)
        grouped = grouped.set_column(grouped.column_names.index("result"), "result",
                                     pa.array(mean, pa.float32()))
    splits = split_of(grouped["position_hash"].to_numpy())
    grouped = grouped.append_column("split", pa.array(splits.tolist(), pa.string()))
    columns = ["board", "move", "board_size", "to_move", "ply", "count", "position_hash",
               "result", "game_id", "source", "split"]
    return grouped.select([c for c in columns if c in grouped.column_names])


@contextmanager
def sgf_token_by_token() -> Iterator[None]:
    """Within the block, `read_sgf` parses every token with the general parser: the fast
    main-line path (`_Parser._main_line_stretch`) declines every stretch."""
    parser = sgf._Parser
    fast = parser.__dict__["_main_line_stretch"]
    parser._main_line_stretch = lambda self, start, top: None
    try:
        yield
    finally:
        parser._main_line_stretch = fast
