"""One source (a record file) -> its raw pairs, for every registered game through one path.

The game replays its records (`Game.replay_source`: the rules, the record codecs and the
compact board encoding are the game's); this module writes what comes out. The ingest flow
uses `write_source_pairs`: a Parquet intermediate written a batch at a time (memory does not
grow with the source: a KGS archive holds millions of positions), atomically (a temporary
name, fsync, rename), with its row count and SHA-256. `read_source_pairs` keeps the pairs in
memory instead (tests, benchmarks, the in-memory dedup of services.dataset.build).

Per source, `read = ingested + quarantined`; games kept up to a point with a note in the
quarantine table are counted by kind (`SourceResult.notes`, `Game.kept_notes`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from services.atomic_files import atomic_path
from services.checksums import sha256_file
from services.dataset.shards import BOARD_CODEC
from services.games.base import Game, SourceResult

# rows per row group of an intermediate: ~100 MB of Go boards held at a time
BATCH_ROWS = 1 << 16
# columns whose values are nearly all distinct: no dictionary (Parquet would build one for
# each column chunk's first page and then fall back to plain values) and, for the boards, no
# statistics (nobody prunes on them)
_BOARD_COLUMNS = ("board", "packed_board")
_DISTINCT_COLUMNS = (*_BOARD_COLUMNS, "position_hash")


def read_source_pairs(game: Game, path: str | Path, name: str | None = None, *,
                      board_size: int | None = None, packed: bool = False) -> SourceResult:
    """Every pair of one source in memory (`result.pairs`, one table), boards as network
    inputs unless `packed`."""
    path = Path(path)
    result = SourceResult(source=name or path.name)
    tables = list(game.replay_source(path, result, board_size=board_size, packed=packed))
    result.pairs = pa.concat_tables(tables)
    result.rows = result.pairs.num_rows
    return result


def write_source_pairs(game: Game, path: str | Path, out: str | Path, name: str | None = None,
                       *, board_size: int | None = None) -> SourceResult:
    """The source's pairs, boards as the shards store them, written to the Parquet file `out`
    as they come; `result.rows` and `result.sha256` describe the file (`result.pairs` stays
    None)."""
    path = Path(path)
    result = SourceResult(source=name or path.name)
    return write_pairs(game.replay_source(path, result, board_size=board_size, packed=True),
                       out, result)


def write_pairs(tables: Iterator[pa.Table], out: str | Path,
                result: SourceResult) -> SourceResult:
    """Write a source's tables of raw pairs (at least one: the first fixes the schema) to the
    Parquet intermediate `out`, atomically, a batch of rows at a time; `result.rows` and
    `result.sha256` describe the file. What `write_source_pairs` does with a replay's tables,
    and the self-play ingest (`services.selfplay.pairs`) with its own."""
    out = Path(out)
    first = next(tables)  # every replay gives at least one table: it fixes the schema
    schema = first.schema
    held_tables: list[pa.Table] = []
    held = 0
    with atomic_path(out) as tmp:
        with pq.ParquetWriter(tmp, schema, **_intermediate_options(schema)) as writer:
            for table in itertools.chain([first], tables):
                held_tables.append(table)
                held += table.num_rows
                if held >= BATCH_ROWS:
                    _write(writer, held_tables, schema, held)
                    result.rows += held
                    held_tables, held = [], 0
            if held or not result.rows:
                _write(writer, held_tables, schema, held)
                result.rows += held
        result.sha256 = sha256_file(tmp)
    return result


def _write(writer: pq.ParquetWriter, tables: list[pa.Table], schema: pa.Schema,
           rows: int) -> None:
    table = (pa.concat_tables(tables).select(schema.names).cast(schema) if tables
             else schema.empty_table())
    writer.write_table(table, row_group_size=max(rows, 1))


def _intermediate_options(schema: pa.Schema) -> dict:
    """ParquetWriter options of an intermediate: LZ4 (`BOARD_CODEC`: cheap to write and to
    read back), and no dictionary or statistics where they cost and serve nobody."""
    names = schema.names
    return {"compression": BOARD_CODEC,
            "use_dictionary": [c for c in names if c not in _DISTINCT_COLUMNS],
            "write_statistics": [c for c in names if c not in _BOARD_COLUMNS]}
