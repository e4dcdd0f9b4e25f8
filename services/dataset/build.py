"""From game records to the deduplicated pair table that the shards hold.

One function per step so the flow can run them as tasks: `source_pairs` turns one source's
games into raw pairs (and quarantine rows for games that break the rules), `deduplicate`
merges every source's pairs under symmetry and assigns splits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from services.dataset.canonical import canonicalize, split_of
from services.dataset.pairs import replay
from services.games.gomoku import Rule
from services.records.rif import Rejected, RifGame

BOARD_SIZE = 15


@dataclass
class SourceResult:
    """What one source file produced: raw pairs plus the bookkeeping that must reconcile."""

    source: str
    pairs: pa.Table
    quarantine: list[dict] = field(default_factory=list)
    read: int = 0
    ingested: int = 0

    @property
    def quarantined(self) -> int:
        return len(self.quarantine)


def quarantine_row(source: str, record_id: str, reason: str, snippet: str = "") -> dict:
    return {"source": source, "record_id": record_id, "reason": reason, "snippet": snippet[:200]}


def source_pairs(source: str, records: Iterable[RifGame | Rejected]) -> SourceResult:
    boards, moves, to_move, plies, game_ids = [], [], [], [], []
    result = SourceResult(source=source, pairs=pa.table({}))
    for record in records:
        result.read += 1
        if isinstance(record, Rejected):
            result.quarantine.append(
                quarantine_row(source, record.record_id, record.reason, record.snippet))
            continue
        game = replay(record.moves, BOARD_SIZE, Rule.FREESTYLE)
        if game.error is not None:
            snippet = " ".join(str(m) for m in record.moves[:40])
            result.quarantine.append(quarantine_row(source, record.game_id, game.error, snippet))
            continue
        result.ingested += 1
        boards.append(game.boards)
        moves.append(game.moves)
        to_move.append(game.to_move)
        plies.append(game.plies)
        game_ids.extend([record.game_id] * len(game.moves))
    if boards:
        b = np.concatenate(boards)
        result.pairs = pairs_table(b, np.concatenate(moves), np.concatenate(to_move),
                                   np.concatenate(plies), game_ids, source)
    else:
        result.pairs = pairs_table(np.zeros((0, BOARD_SIZE**2), np.int8), np.zeros(0, np.int16),
                                   np.zeros(0, np.int8), np.zeros(0, np.int16), [], source)
    return result


def pairs_table(boards: np.ndarray, moves: np.ndarray, to_move: np.ndarray, plies: np.ndarray,
                game_ids: list[str], source: str) -> pa.Table:
    """Canonicalise raw pairs; one row per occurrence (count 1), not yet deduplicated."""
    cb, cm, h = canonicalize(boards, moves, BOARD_SIZE)
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
        "game_id": pa.array(game_ids, pa.string()),
        "source": pa.array([source] * n, pa.string()),
    })


def deduplicate(tables: list[pa.Table]) -> pa.Table:
    """Merge identical canonical (board, move) pairs, summing counts; then assign splits."""
    table = pa.concat_tables(tables)
    grouped = table.group_by(["board", "move"], use_threads=False).aggregate([
        ("board_size", "min"), ("to_move", "min"), ("ply", "min"), ("count", "sum"),
        ("position_hash", "min"), ("game_id", "min"), ("source", "min"),
    ])
    grouped = grouped.rename_columns({
        "board_size_min": "board_size", "to_move_min": "to_move", "ply_min": "ply",
        "count_sum": "count", "position_hash_min": "position_hash", "game_id_min": "game_id",
        "source_min": "source",
    })
    splits = split_of(grouped["position_hash"].to_numpy())
    grouped = grouped.append_column("split", pa.array(splits.tolist(), pa.string()))
    columns = ["board", "move", "board_size", "to_move", "ply", "count", "position_hash",
               "game_id", "source", "split"]
    return grouped.select(columns)
