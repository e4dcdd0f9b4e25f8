"""Go sources (`.sgf` files, KGS month archives) -> raw pairs + quarantine, and Go dedup.

`go_source_pairs` is the Go counterpart of `services.dataset.build.source_pairs`: it reads one
source (`read_sgf` for a `.sgf` file, `read_archive` for `.tar.gz` / `.tgz` / `.tar.bz2` /
`.zip`), replays every game (`services.dataset.go_pairs`) and returns a `GoSourceResult`.

Bookkeeping, per source: `read = ingested + quarantined`.
- a record the reader rejects (`SgfRejected`) and a game of another board size than the
  dataset's is quarantined (one quarantine row, reason and snippet);
- a game whose replay hits an illegal move keeps the pairs before that move and counts as
  ingested; it is also `truncated` and gets a quarantine-table row whose reason starts with
  "cut short by an illegal move: ", so the quarantine table holds `quarantined + truncated` rows.

`go_deduplicate` merges identical canonical (board, move) pairs of every Go source with an
Arrow group_by (count summed, smallest ply / position hash / rank / game id / source, result
averaged over the occurrences whose result is known), then assigns splits with `split_of`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from services.dataset.build import SourceResult, quarantine_row
from services.dataset.go_pairs import game_pairs, pairs_table, split_of
from services.records.sgf import SgfGame, SgfRejected, read_archive, read_sgf

GO_SUFFIXES = (".sgf", ".tar.gz", ".tgz", ".tar.bz2", ".zip")
TRUNCATED = "cut short by an illegal move: "
DEFAULT_GO_SIZE = 19


def is_go_source(path: str | Path) -> bool:
    return str(path).lower().endswith(GO_SUFFIXES)


@dataclass
class GoSourceResult(SourceResult):
    """SourceResult plus the games cut short by an illegal move (ingested, with a note in the
    quarantine table that does not count as quarantined)."""

    truncated: int = 0

    @property
    def quarantined(self) -> int:
        return len(self.quarantine) - self.truncated


def _records(path: Path) -> Iterable[SgfGame | SgfRejected]:
    if path.name.lower().endswith(".sgf"):
        return read_sgf(path)
    return read_archive(path)


def _record_id(record: SgfGame | SgfRejected, name: str) -> str:
    """'game N', prefixed with the archive member when the record comes from one."""
    own = record.record_id if isinstance(record, SgfRejected) else f"game {record.game_index}"
    member = record.source.split(":", 1)[1] if record.source.startswith(name + ":") else ""
    return f"{member}: {own}" if member else own


def _moves_snippet(game: SgfGame, size: int) -> str:
    out = []
    for color, point in game.moves[:40]:
        where = "pass" if point is None else f"{point % size},{point // size}"
        out.append(f"{'BW'[color - 1]}[{where}]")
    return " ".join(out)


def go_source_pairs(path: str | Path, name: str | None = None,
                    board_size: int | None = DEFAULT_GO_SIZE) -> GoSourceResult:
    """Raw canonical pairs (one row per occurrence, every PAIR_SCHEMA column but `split`) of
    one Go source. `board_size`: the only size kept (others are quarantined); None keeps all.
    """
    path = Path(path)
    name = name or path.name
    result = GoSourceResult(source=name, pairs=pa.table({}))
    tables = []
    for record in _records(path):
        result.read += 1
        rid = _record_id(record, name)
        if isinstance(record, SgfRejected):
            result.quarantine.append(quarantine_row(name, rid, record.reason, record.snippet))
            continue
        if board_size is not None and record.size != board_size:
            result.quarantine.append(quarantine_row(
                name, rid, f"board size {record.size} (this dataset holds "
                f"{board_size}x{board_size} games)", _moves_snippet(record, record.size)))
            continue
        try:
            pairs = game_pairs(record)
        except Exception as exc:  # a record the replay cannot handle at all
            result.quarantine.append(quarantine_row(
                name, rid, f"replay failed: {exc}", _moves_snippet(record, record.size)))
            continue
        result.ingested += 1
        if pairs.error is not None:
            result.truncated += 1
            result.quarantine.append(quarantine_row(
                name, rid, f"{TRUNCATED}{pairs.error} (pairs kept up to move "
                f"{len(pairs.moves)})", _moves_snippet(record, record.size)))
        if len(pairs.moves):
            tables.append(pairs_table(pairs, f"{record.source}#{record.game_index}", name,
                                      rule=record.rules))
    result.pairs = pa.concat_tables(tables) if tables else _empty_pairs()
    return result


def _empty_pairs() -> pa.Table:
    from services.dataset.shards import PAIR_SCHEMA

    return PAIR_SCHEMA.remove(PAIR_SCHEMA.get_field_index("split")).empty_table()


def go_deduplicate(tables: list[pa.Table]) -> pa.Table:
    """Merge identical canonical (board, move) pairs across Go sources; assign splits."""
    table = pa.concat_tables([t.select(tables[0].column_names) for t in tables])
    # NaN (unknown result) -> null, so the mean runs over the known results only
    result = table["result"]
    table = table.set_column(table.column_names.index("result"), "result",
                             pc.if_else(pc.is_nan(result), pa.scalar(None, pa.float32()),
                                        result))
    grouped = table.group_by(["board", "move"], use_threads=False).aggregate([
        ("count", "sum"), ("ply", "min"), ("result", "mean"), ("mover_rank", "min"),
        ("game_id", "min"), ("source", "min"), ("position_hash", "min"),
        ("board_size", "min"), ("to_move", "min"), ("game", "min"), ("rule", "min"),
    ])
    names = {f"{c}_{agg}": c for c, agg in (
        ("count", "sum"), ("ply", "min"), ("result", "mean"), ("mover_rank", "min"),
        ("game_id", "min"), ("source", "min"), ("position_hash", "min"),
        ("board_size", "min"), ("to_move", "min"), ("game", "min"), ("rule", "min"))}
    grouped = grouped.rename_columns([names.get(c, c) for c in grouped.column_names])
    mean = grouped["result"].to_numpy(zero_copy_only=False).astype(np.float32)  # null -> NaN
    grouped = grouped.set_column(grouped.column_names.index("result"), "result",
                                 pa.array(mean, pa.float32()))
    hashes = grouped["position_hash"].to_numpy().astype(np.uint64)
    grouped = grouped.append_column("split", pa.array(split_of(hashes), pa.string()))
    return grouped.sort_by([("position_hash", "ascending"), ("move", "ascending"),
                            ("board", "ascending")])


__all__ = ["GO_SUFFIXES", "GoSourceResult", "go_deduplicate", "go_source_pairs",
           "is_go_source"]
