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

`write_go_source_pairs` does the same into a Parquet intermediate a batch at a time (what
the ingest flow uses: memory does not grow with the archive); the intermediate holds the
boards packed (column `packed_board`, `go_pairs.pack_planes`' layout, written by the replay
itself: `go_pairs.game_packed_pairs`), and dedup unpacks them as it writes the shards.

`go_deduplicate` merges identical canonical (board, move) pairs of in-memory Go tables with an
Arrow group_by (count summed, smallest ply / position hash / rank / game id / source, the
rule of the smallest game id, result averaged over the occurrences whose result is known),
then assigns splits with `split_of`; the ingest flow deduplicates out of core instead
(`services.dataset.dedup`), to the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from services.atomic_files import atomic_path
from services.checksums import sha256_file
from services.dataset.build import SourceResult, quarantine_row
from services.dataset.go_pairs import (
    PACKED_BOARD,
    GoPairs,
    PackedPairs,
    game_packed_pairs,
    game_pairs,
    packed_pairs_tables,
    pairs_tables,
    split_of,
)
from services.dataset.shards import BOARD_CODEC
from services.records.sgf import ARCHIVE_SUFFIXES, SgfGame, SgfRejected, read_archive, read_sgf

GO_SUFFIXES = (".sgf", *ARCHIVE_SUFFIXES)  # the archive reader's list: one list of them
TRUNCATED = "cut short by an illegal move: "
# rows of games canonicalised and tabled together: big enough that numpy and Arrow calls
# are few, small enough (~12 MB of boards) that the memory is reused, not faulted in anew
TABLE_ROWS = 1 << 13
DEFAULT_GO_SIZE = 19
# rows per row group of an intermediate written by write_go_source_pairs: ~100 MB of boards
# held at a time
BATCH_ROWS = 1 << 16


def is_go_source(path: str | Path) -> bool:
    return str(path).lower().endswith(GO_SUFFIXES)


@dataclass
class GoSourceResult(SourceResult):
    """SourceResult plus the games cut short by an illegal move (ingested, with a note in the
    quarantine table that does not count as quarantined)."""

    truncated: int = 0
    rows: int = 0  # pairs written by write_go_source_pairs
    sha256: str = ""  # of the file write_go_source_pairs wrote

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
    one Go source, in memory. `board_size`: the only size kept (others are quarantined); None
    keeps all. A large archive: `write_go_source_pairs` (bounded memory)."""
    path = Path(path)
    result = GoSourceResult(source=name or path.name, pairs=pa.table({}))
    tables = list(_game_tables(path, result, board_size, packed=False))
    result.pairs = pa.concat_tables(tables) if tables else _empty_pairs()
    return result


def write_go_source_pairs(path: str | Path, out: Path, name: str | None = None,
                          board_size: int | None = DEFAULT_GO_SIZE) -> GoSourceResult:
    """`go_source_pairs` written to the Parquet file `out` as it goes (atomically: a
    temporary name, fsync, rename), a batch of about `BATCH_ROWS` rows at a time, so memory
    does not grow with the source (a KGS archive holds millions of positions). The result's
    `pairs` is empty; `rows` and `sha256` describe the file."""
    path, out = Path(path), Path(out)
    result = GoSourceResult(source=name or path.name, pairs=_empty_pairs())
    schema = packed_schema()
    batch: list[pa.Table] = []
    held = 0
    with atomic_path(out) as tmp:
        with pq.ParquetWriter(tmp, schema, **_intermediate_options(schema)) as writer:
            for table in _game_tables(path, result, board_size, packed=True):
                batch.append(table)
                held += table.num_rows
                if held >= BATCH_ROWS:
                    writer.write_table(pa.concat_tables(batch).select(schema.names).cast(schema),
                                       row_group_size=held)
                    result.rows += held
                    batch, held = [], 0
            if batch or not result.rows:
                table = (pa.concat_tables(batch).select(schema.names).cast(schema) if batch
                         else schema.empty_table())
                writer.write_table(table, row_group_size=max(held, 1))
                result.rows += held
        result.sha256 = sha256_file(tmp)
    return result


def _intermediate_options(schema: pa.Schema) -> dict:
    """ParquetWriter options of an intermediate: LZ4 (`BOARD_CODEC`: cheap to write and to
    read back), no dictionary for the packed boards and position hashes (nearly every value
    distinct: Parquet would build a dictionary for each column chunk's first page and then
    fall back to plain values) and no statistics for the boards (nobody prunes on them)."""
    names = schema.names
    return {"compression": BOARD_CODEC,
            "use_dictionary": [c for c in names if c not in (PACKED_BOARD, "position_hash")],
            "write_statistics": [c for c in names if c != PACKED_BOARD]}


def _game_tables(path: Path, result: GoSourceResult, board_size: int | None,
                 packed: bool) -> Iterator[pa.Table]:
    """Tables of the ingested games' pairs (boards packed or not, `pairs_tables`), in record
    order; read / ingested / quarantine / truncated counted into `result` on the way."""
    name = result.source
    replay = game_packed_pairs if packed else game_pairs
    batch: list[tuple[GoPairs | PackedPairs, str, str]] = []  # games tabled together (speed)
    held = 0
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
            pairs = replay(record)
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
            batch.append((pairs, f"{record.source}#{record.game_index}", record.rules))
            held += len(pairs.moves)
            if held >= min(TABLE_ROWS, BATCH_ROWS):
                yield _batch_table(batch, name, packed)
                batch, held = [], 0
    if batch:
        yield _batch_table(batch, name, packed)


def _batch_table(batch: list[tuple[GoPairs | PackedPairs, str, str]], name: str,
                 packed: bool) -> pa.Table:
    games, ids, rules = zip(*batch, strict=True)
    if packed:  # replayed straight into canonical packed images (`game_packed_pairs`)
        return packed_pairs_tables(games, ids, name, rules)
    return pairs_tables(games, ids, name, rules)


def packed_schema() -> pa.Schema:
    """The columns of a Go intermediate: PAIR_SCHEMA's but `split`, with `PACKED_BOARD`
    (`go_pairs.pack_planes`: a quarter of the bytes, the same equality and order) in place
    of `board`, which is what dedup groups and sorts by."""
    schema = _empty_pairs().schema
    at = schema.get_field_index("board")
    return schema.remove(at).insert(at, pa.field(PACKED_BOARD, pa.binary()))


def _empty_pairs() -> pa.Table:
    from services.dataset.shards import PAIR_SCHEMA

    return PAIR_SCHEMA.remove(PAIR_SCHEMA.get_field_index("split")).empty_table()


# each column of a merged pair: count summed, the mean of the known results, the rule of the
# smallest game id, the smallest of the others
_MERGED = (("count", "sum"), ("ply", "min"), ("result", "mean"), ("mover_rank", "min"),
           ("game_id", "min"), ("source", "min"), ("position_hash", "min"),
           ("board_size", "min"), ("to_move", "min"), ("game", "min"), ("rule", "first"))


def go_deduplicate(tables: list[pa.Table]) -> pa.Table:
    """Merge identical canonical (board, move) pairs across Go sources; assign splits."""
    table = pa.concat_tables([t.select(tables[0].column_names) for t in tables])
    # NaN (unknown result) -> null, so the mean runs over the known results only
    result = table["result"]
    table = table.set_column(table.column_names.index("result"), "result",
                             pc.if_else(pc.is_nan(result), pa.scalar(None, pa.float32()),
                                        result))
    # rows by game id, then rule: a pair's "first" rule is the smallest game id's (the
    # out-of-core build's choice, `services.dataset.dedup`), not the smallest rule name
    table = table.sort_by([("game_id", "ascending"), ("rule", "ascending")])
    grouped = table.group_by(["board", "move"], use_threads=False).aggregate(list(_MERGED))
    names = {f"{c}_{agg}": c for c, agg in _MERGED}
    grouped = grouped.rename_columns([names.get(c, c) for c in grouped.column_names])
    mean = grouped["result"].to_numpy(zero_copy_only=False).astype(np.float32)  # null -> NaN
    grouped = grouped.set_column(grouped.column_names.index("result"), "result",
                                 pa.array(mean, pa.float32()))
    hashes = grouped["position_hash"].to_numpy().astype(np.uint64)
    grouped = grouped.append_column("split", pa.array(split_of(hashes), pa.string()))
    return grouped.sort_by([("position_hash", "ascending"), ("move", "ascending"),
                            ("board", "ascending")])


__all__ = ["GO_SUFFIXES", "GoSourceResult", "go_deduplicate", "go_source_pairs",
           "is_go_source", "packed_schema", "write_go_source_pairs"]
