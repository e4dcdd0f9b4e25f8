"""Dedup, split and shard writing out of core: one DuckDB query over the per-source Parquet
intermediates, its sorted result streamed into the shards.

Why DuckDB: the pairs of a whole archive collection do not fit in memory (19x19 Go boards are
1,444 bytes a row: 10 million positions are 14 GB of boards). DuckDB's aggregates and sort
spill to `temp_directory` once `memory_limit` is reached, so the build runs in bounded memory
at any size; the Python side only ever holds one record batch and one shard row group.

What the query does (every row of the intermediates is one occurrence of a canonical
(board, move) pair):

1. games: each game (source, game id) gets a content key, the XOR of its positions' hashes
   (symmetry-invariant), so the same game under another name or mirrored is the same key;
   `HOLDOUT_GAMES` of the keys (by a mix of the key's bits) are held out;
2. pairs: rows merge only when the full canonical board bytes and the move are equal (and both
   come from held-out games or both from others): count summed, smallest ply / position hash
   / mover rank / game id / source, the rule of the smallest game id, the mover's result
   averaged over the occurrences whose result is known (NaN when none is). DuckDB sorts the
   raw rows by (split, position hash, move), which puts the rows that merge next to each
   other, and they are merged as the batches stream by (`_merged`);
3. the split of a pair from a held-out game is `game_test`. Any other pair's split is a
   function of its position (position hash) alone, so a position never sits in two of train,
   validation and test (no leakage, under any symmetry): a position that occurs at least
   `MIN_TRAIN_OCCURRENCES` times outside the held-out games (every move from it together)
   goes to train, any other by its hash (`splits.split_codes`: 5 % validation, 5 % test).
   Positions that recur across games (the empty board, common openings) are the ones the
   engine meets most: splitting them by hash alone sent each one wholesale to validation or
   test one time in ten, and the trained network never saw it (the empty board of the
   Gomoku sample landed in test). With k = 2 every recurring position trains, and validation /
   test measure moves in positions met once; `game_test` measures whole unseen games,
   openings included (what a player meets);
4. pairs come out ordered by (split, position hash, move, board), the shards' order, and are
   written shard by shard (`shards.write_sorted_shards`): the result depends only on the
   intermediates, so an incremental run (new sources read, old intermediates reused) writes
   the very bytes a run from scratch writes.

Self-play intermediates (a `policy_target` column, `services.selfplay.pairs`) take the same
query but no merge: each row is one search of its position with its own target, kept with
count 1 and its lineage columns, ordered within equal (position, move) by board, game and ply
(docs/selfplay.md). One build holds one kind: expert or self-play.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from services.dataset import splits
from services.dataset.shards import (
    GAME_SPLIT,
    PACKED_BOARDS,
    PAIR_SCHEMA,
    PLAIN_BOARDS,
    POLICY_TARGET,
    SELFPLAY_COLUMNS,
    SELFPLAY_SCHEMA,
    SPLITS,
    write_sorted_shards,
)

logger = logging.getLogger(__name__)

MIN_TRAIN_OCCURRENCES = 2
HOLDOUT_GAMES = 0.05
# DuckDB's own memory (hash tables, sort runs, buffers) before it spills to disk; the process
# adds the Python side (one record batch, one row group: ~100-300 MB for Go)
DEFAULT_MEMORY_LIMIT = "1GB"
# rows per record batch fetched from DuckDB (Go: ~6 MB of packed boards; 4x as many rows
# measured no cheaper)
FETCH_ROWS = 1 << 14
_MIX = 0x9E3779B97F4A7C15  # splits.split_codes' multiplier: the same split per hash
_SPLIT_BITS = 24  # split_codes keeps the top 24 bits of the mixed hash


@dataclass(frozen=True)
class BuildSettings:
    """How the query may use the machine. `threads` None: DuckDB's default (every core);
    `temp_dir` None: a fresh folder under the system's temporary folder."""

    memory_limit: str = DEFAULT_MEMORY_LIMIT
    threads: int | None = None
    temp_dir: Path | None = None
    min_train_occurrences: int = MIN_TRAIN_OCCURRENCES
    holdout_games: float = HOLDOUT_GAMES


def _below(fraction: float) -> int:
    """The bound under which the top 24 bits of a mixed hash fall for `fraction` of hashes:
    splits.split_codes' own, so the SQL split of a hash is the one split_of gives."""
    return int(splits._below(fraction))


def _mixed(expr: str) -> str:
    """SQL: the top 24 bits of (expr * _MIX mod 2**64) for a UBIGINT expression.

    Computed on 32-bit halves in UBIGINT (no product overflows 64 bits): UHUGEINT products
    and modulo cost about 2 CPU-s a million rows, this a hundredth of that."""
    x = f"(({expr})::UBIGINT)"
    low, high = f"({x} & 4294967295)", f"({x} >> 32)"
    mix_low, mix_high = _MIX & 0xFFFFFFFF, _MIX >> 32
    # bits 32-63 of the product: the high half of low * mix_low plus the low halves of the
    # two cross products (high * mix_high only reaches bits 64 and up)
    carry = f"(({low} * {mix_low}::UBIGINT) >> 32)"
    cross = (f"((({high} * {mix_low}::UBIGINT) & 4294967295) + "
             f"(({low} * {mix_high}::UBIGINT) & 4294967295))")
    return f"((({carry} + {cross}) & 4294967295) >> {32 - _SPLIT_BITS})"


def _sql_list(paths: Sequence[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def _key_column(present: set[str]) -> str:
    """The board column the intermediates group and sort by: Go intermediates hold the
    boards packed (`go_replay.PACKED_BOARD`: equal and ordered exactly as the boards are),
    Gomoku ones the boards themselves. One dataset holds one game: not both."""
    from services.games.go.replay import PACKED_BOARD

    if PACKED_BOARD in present:
        if "board" in present:
            raise ValueError("intermediates mix packed Go boards and plain boards: one "
                             "dataset holds one game")
        return PACKED_BOARD
    return "board"


def _source_sql(paths: Sequence[Path], game: str, settings: BuildSettings) -> tuple[str, str]:
    """(a SELECT of the games for the `games` table, a SELECT of every raw row with its
    game's `holdout` flag, game number and source number), both over the given
    intermediates.

    Each game (source, game id) gets `game_no`, the rank of its game id among all game ids,
    and `source_no`, the rank of its source name: the sort carries these integers instead
    of the strings (a game id is tens of bytes, most of a row after the packed board: the
    sort of every raw row took half again as long with them), and as ranks they keep the
    strings' order, so the smallest number is the smallest string when rows merge."""
    files = _sql_list(paths)
    held = _below(settings.holdout_games)
    # intermediates of either game: Gomoku ones carry no game / mover rank column
    source = f"read_parquet({files}, union_by_name = true)"
    present = _columns(paths)

    def column(name: str, default: str) -> str:
        return f"r.{name}" if name in present else default

    # self-play rows carry their policy target and lineage through to the shards
    lineage = "".join(f', r."{name}"' for name, _ in SELFPLAY_COLUMNS) \
        if _selfplay(paths) else ""
    game_col, rank_col = column("game", f"'{game}'"), column("mover_rank", "''")
    rule_col, result_col = column("rule", "''"), column("result", "'NaN'::FLOAT")
    games = f"""
        SELECT source, game_id, holdout,
               (dense_rank() OVER (ORDER BY game_id) - 1)::INTEGER AS game_no,
               (dense_rank() OVER (ORDER BY source) - 1)::INTEGER AS source_no
        FROM (SELECT source, game_id, {_mixed('bit_xor(position_hash)')} < {held} AS holdout
              FROM {source} GROUP BY source, game_id)"""
    raw = f"""
        SELECT r.{_key_column(present)} AS board, r.move, r.board_size, r.to_move, r.ply,
               r.count, r.position_hash, {result_col} AS result,
               coalesce({rank_col}, '') AS mover_rank, g.game_no, g.source_no,
               coalesce({game_col}, '{game}') AS game, coalesce({rule_col}, '') AS rule,
               g.holdout{lineage}
        FROM {source} r JOIN games g USING (source, game_id)"""
    return games, raw


def _columns(paths: Sequence[Path]) -> set[str]:
    import pyarrow.parquet as pq

    names: set[str] = set()  # every file's schema: they may differ
    for p in paths:
        names |= set(pq.read_schema(p).names)
    return names


def _selfplay(paths: Sequence[Path]) -> bool:
    """Whether the intermediates are self-play pairs (a `policy_target` column: rows kept one
    by one, never merged) rather than records' pairs; ValueError when they mix both (the
    expert rows would get null targets, the self-play ones would merge)."""
    import pyarrow.parquet as pq

    kinds = {POLICY_TARGET in pq.read_schema(p).names for p in paths}
    if len(kinds) > 1:
        raise ValueError("intermediates mix self-play pairs and records' pairs: ingest them "
                         "into separate dataset folders (docs/selfplay.md)")
    return kinds == {True}


def _connect(settings: BuildSettings, temp: Path):
    import duckdb

    config = {"memory_limit": settings.memory_limit, "temp_directory": str(temp),
              "preserve_insertion_order": False}
    if settings.threads:
        config["threads"] = settings.threads
    return duckdb.connect(config=config)


class _TempDir:
    """DuckDB's spill folder for one query, removed afterwards."""

    def __init__(self, base: Path | None) -> None:
        parent = Path(base) if base else Path(tempfile.gettempdir())
        parent.mkdir(parents=True, exist_ok=True)
        self.path = parent / f".duckdb-spill-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> Path:
        self.path.mkdir()
        return self.path

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _position_split_sql(settings: BuildSettings) -> str:
    codes = {name: i for i, name in enumerate(SPLITS)}
    validation_and_test, test = _below(0.05 + 0.05), _below(0.05)
    hashed = (f"CASE WHEN {_mixed('p.position_hash')} < {test} THEN {codes['test']} "
              f"WHEN {_mixed('p.position_hash')} < {validation_and_test} "
              f"THEN {codes['validation']} ELSE {codes['train']} END")
    k = settings.min_train_occurrences
    return (f"CASE WHEN p.holdout THEN {codes[GAME_SPLIT]} "
            f"WHEN o.occurrences >= {k} THEN {codes['train']} ELSE {hashed} END")


def sorted_pairs(paths: Sequence[Path], game: str,
                 settings: BuildSettings = BuildSettings()) -> Iterator[pa.RecordBatch]:
    """Record batches of the deduplicated, split pairs of the intermediates at `paths`, in
    the shards' order (split, position hash, move, board); every PAIR_SCHEMA column.

    Query shape: a position's occurrences outside the held-out games are counted from the
    raw rows (its hash and count columns only) and joined to them for the split; DuckDB
    sorts the raw rows, and equal pairs are merged as they stream by (`_merged`). Go boards
    are compared and sorted packed (a quarter of the bytes; the same equality and order)
    and unpacked here, a batch at a time."""
    if not paths:
        return
    paths = list(paths)
    batches, packed = _sorted_batches(paths, game, settings)
    if not packed:
        yield from batches
        return
    for batch in batches:
        yield _unpacked(batch)


def _sorted_batches(paths: list[Path], game: str, settings: BuildSettings,
                    unique: Counter[str] | None = None,
                    ) -> tuple[Iterator[pa.RecordBatch], bool]:
    """(`sorted_pairs`' batches with Go boards still packed, whether they are packed);
    `unique`, when given, counts each source's unique pairs (`build_shards`)."""
    games, raw = _source_sql(paths, game, settings)
    packed = _key_column(_columns(paths)) != "board"
    selfplay = _selfplay(paths)
    # self-play rows are not merged: the board, then the game and ply order the rows of one
    # (position, move) so that the shards' bytes depend on the intermediates alone
    lineage = "".join(f', "{name}"' for name, _ in SELFPLAY_COLUMNS) if selfplay else ""
    ties = ", board, game_no, source_no, ply" if selfplay else ""
    query = f"""
    WITH occurrences AS (
        SELECT r.position_hash, sum(r.count) AS occurrences
        FROM read_parquet({_sql_list(paths)}, union_by_name = true) r
        JOIN games g USING (source, game_id)
        WHERE NOT g.holdout GROUP BY r.position_hash
    ),
    split AS (
        SELECT p.*, {_position_split_sql(settings)} AS split_code
        FROM ({raw}) p LEFT JOIN occurrences o USING (position_hash)
    )
    SELECT board, move, game, rule, board_size, to_move, ply, count, position_hash, result,
           mover_rank, game_no, source_no, split_code{lineage}
    FROM split ORDER BY split_code, position_hash, move{ties}
    """

    def batches() -> Iterator[pa.RecordBatch]:
        with _TempDir(settings.temp_dir) as temp:
            con = _connect(settings, temp)
            try:
                con.execute(f"CREATE TEMP TABLE games AS {games}")
                game_ids, sources = (con.sql(
                    f"SELECT any_value({name}) FROM games GROUP BY {no} ORDER BY {no}"
                ).to_arrow_table().column(0).combine_chunks()
                    for name, no in (("game_id", "game_no"), ("source", "source_no")))
                numbered: Counter[int] = Counter()
                rows = (_unmerged if selfplay else _merged)(
                    con.sql(query).to_arrow_reader(FETCH_ROWS),
                    None if unique is None else numbered)
                for batch in rows:
                    yield _named(batch, game_ids, sources)
                if unique is not None:
                    unique.update({sources[no].as_py(): n for no, n in numbered.items()})
            finally:
                con.close()

    return batches(), packed


def _named(batch: pa.RecordBatch, game_ids: pa.Array, sources: pa.Array) -> pa.RecordBatch:
    """`batch` with its game and source numbers (`_source_sql`) turned back into the game id
    and source strings."""
    for number, name, values in (("game_no", "game_id", game_ids),
                                 ("source_no", "source", sources)):
        at = batch.schema.get_field_index(number)
        batch = batch.set_column(at, name, values.take(batch.column(at)))
    return batch


_SORT_KEYS = ("split_code", "position_hash", "move")


def _merged(batches: Iterable[pa.RecordBatch],
            unique: Counter[str] | None = None) -> Iterator[pa.RecordBatch]:
    """Raw rows (one per occurrence) sorted by (split, position hash, move) -> the merged
    pairs sorted by (split, position hash, move, board), with the `split` names in place of
    the `split_code` column (named here, after the merge: the sort carries only the codes).

    Why the merge is done here and not by a GROUP BY in the query: rows that merge share
    their (split, hash, move) (the hash and split are functions of the board, the holdout
    flag decides the game split), so after DuckDB's sort they are neighbours, and equal
    (split, hash, move) are rare (a position met in several games, or the same stones and
    move with other ages or ko) and come in runs of a few. DuckDB's hash aggregate on the
    board bytes with string minimums cost more than its sort of all the raw rows. Each run
    of more than one row is grouped by board here (`_merge_runs`); the run at the end of a
    batch is held back until the next batch shows where it ends. `unique`: see `_merge_runs`."""
    carry: pa.Table | None = None
    for batch in batches:
        table = pa.Table.from_batches([batch])
        if "split" in table.column_names:  # named from the codes at the end
            table = table.drop_columns(["split"])
        if carry is not None:
            table = pa.concat_tables([carry, table])  # (no copy: the keys are taken below)
        n = table.num_rows
        if n == 0:
            continue
        keys = [table[k].to_numpy() for k in _SORT_KEYS]
        tail = n - 1  # the first row of the run that ends the table
        while tail and all(k[tail - 1] == k[-1] for k in keys):
            tail -= 1
        carry = table.slice(tail)
        if tail:
            yield from _merge_runs(table.slice(0, tail), [k[:tail] for k in keys], unique)
    if carry is not None and carry.num_rows:
        yield from _merge_runs(carry, [carry[k].to_numpy() for k in _SORT_KEYS], unique)


def _unmerged(batches: Iterable[pa.RecordBatch],
              unique: Counter[str] | None = None) -> Iterator[pa.RecordBatch]:
    """Self-play rows, sorted, as they come (no merge: each is one visit of its position with
    its own target), the `split` names in place of `split_code`; `unique` counts every row
    for its source."""
    for batch in batches:
        table = pa.Table.from_batches([batch])
        if unique is not None:
            _count_sources(table["source_no"], unique)
        codes = table["split_code"]
        yield from table.drop_columns(["split_code"]).append_column(
            "split", _SPLIT_NAMES.take(codes)).to_batches()


def _merge_runs(table: pa.Table, keys: list,
                unique: Counter[str] | None = None) -> Iterator[pa.RecordBatch]:
    """`table` (whole runs of equal (split, hash, move); `keys`: those columns as arrays)
    with the rows of equal board in a run merged (`_merge_groups`) and each run in board
    byte order, as record batches with the split names (`split`) in place of `split_code`.

    The merged rows go back where their run stood: each output row is placed by the index
    of its run's first row (the rows outside runs by their own), a stable integer sort
    that keeps a run's merged rows in their board order (no sort on the board bytes).

    `unique`, when given, gets +1 for each source in each output row that source has rows
    in: a row outside runs counts for its source, a merged one for each distinct source of
    the rows merged into it."""
    import numpy as np

    same = np.ones(table.num_rows - 1, bool)
    for k in keys:
        same &= k[1:] == k[:-1]
    if unique is not None and not same.any():
        _count_sources(table["source_no"], unique)
    if same.any():
        in_run = np.zeros(table.num_rows, bool)
        in_run[1:] |= same
        in_run[:-1] |= same
        starts = np.flatnonzero(in_run & np.r_[True, ~same])  # each run's first row
        if unique is not None:
            _count_sources(table.filter(~in_run)["source_no"], unique)
            sources = table.filter(in_run).select([*_GROUP_KEYS, "source_no"])
            _count_sources(sources.group_by(sources.column_names, use_threads=False)
                           .aggregate([])["source_no"], unique)
        runs = _merge_groups(table.filter(in_run)).sort_by(
            [(k, "ascending") for k in _GROUP_KEYS])
        run_keys = [runs[k].to_numpy() for k in _SORT_KEYS]
        new_run = np.ones(runs.num_rows, bool)
        if runs.num_rows > 1:
            new_run[1:] = ~np.logical_and.reduce([k[1:] == k[:-1] for k in run_keys])
        single = np.flatnonzero(~in_run)
        at = np.concatenate([single, starts[np.cumsum(new_run) - 1]])
        rows = np.concatenate([single, table.num_rows + np.arange(runs.num_rows)])
        table = pa.concat_tables([table, runs.cast(table.schema)]).take(
            rows[np.argsort(at, kind="stable")])
    codes = table["split_code"]
    yield from table.drop_columns(["split_code"]).append_column(
        "split", _SPLIT_NAMES.take(codes)).to_batches()


def _count_sources(sources: pa.ChunkedArray | pa.Array, unique: Counter) -> None:
    """unique[s] += how many times s is in `sources`."""
    import pyarrow.compute as pc

    for pair in pc.value_counts(sources).to_pylist():
        unique[pair["values"]] += pair["counts"]


_GROUP_KEYS = [*_SORT_KEYS, "board"]
# each column of a merged pair: count summed, the smallest ply / sizes / ranks / ids /
# source / game, the mean of the known results, the rule of the smallest game id (rows
# come ordered by game id and rule, and "first" keeps that order)
_AGGREGATES = (("count", "sum"), ("ply", "min"), ("result", "mean"), ("mover_rank", "min"),
               ("game_no", "min"), ("source_no", "min"), ("game", "min"), ("board_size", "min"),
               ("to_move", "min"), ("rule", "first"))
_SPLIT_NAMES = pa.array(SPLITS, pa.string())  # by split code


def _merge_groups(rows: pa.Table) -> pa.Table:
    """The rows of equal (split, hash, move, board) merged into one pair each (in no
    particular order); the columns of `rows`."""
    import pyarrow.compute as pc

    result = rows["result"]
    rows = rows.set_column(rows.column_names.index("result"), "result", pc.if_else(
        pc.is_nan(result), pa.scalar(None, result.type), result))
    rows = rows.sort_by([(k, "ascending") for k in (*_GROUP_KEYS, "game_no", "rule")])
    grouped = rows.group_by(_GROUP_KEYS, use_threads=False).aggregate(list(_AGGREGATES))
    grouped = grouped.rename_columns([c.rsplit("_", 1)[0] if c.endswith(
        tuple(f"_{agg}" for _, agg in _AGGREGATES)) else c for c in grouped.column_names])
    mean = grouped["result"].to_numpy(zero_copy_only=False)  # null (none known) -> NaN
    grouped = grouped.set_column(grouped.column_names.index("result"), "result",
                                 pa.array(mean).cast(result.type))
    return grouped.select(rows.column_names)


def _unpacked(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` with its packed Go boards (`go_replay.pack_planes`) unpacked."""
    import numpy as np

    from services.games.go.replay import packed_width, unpack_planes

    n = batch.num_rows
    boards = batch.column(0)
    sizes = batch.column(batch.schema.get_field_index("board_size")).to_numpy(
        zero_copy_only=False)
    offsets = np.frombuffer(boards.buffers()[1], np.int32, count=n + 1, offset=boards.offset * 4)
    data = np.frombuffer(boards.buffers()[2], np.uint8)
    widths = 4 * sizes.astype(np.int64) ** 2
    out_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(widths, out=out_offsets[1:])
    if out_offsets[-1] >= 2**31:
        raise ValueError("a fetched batch of Go boards exceeds 2 GiB")
    buffer = pa.allocate_buffer(int(out_offsets[-1]))
    out = np.frombuffer(buffer, np.uint8)
    for size in np.unique(sizes).tolist():
        rows = np.flatnonzero(sizes == size)
        width = packed_width(size)
        if (offsets[rows + 1] - offsets[rows] != width).any():
            raise ValueError(f"packed Go boards of size {size} must be {width} bytes")
        if len(rows) == n:  # one board size (always, in practice): contiguous rows
            start = int(offsets[0])
            unpack_planes(data[start:start + n * width].reshape(n, width), size, out)
            continue
        packed = data[offsets[rows][:, None] + np.arange(width)]
        full = 4 * size * size
        out[out_offsets[rows][:, None] + np.arange(full)] = unpack_planes(packed, size)
    column = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(
        out_offsets.astype(np.int32)), buffer])
    return batch.set_column(0, "board", column)


class BuiltShards(NamedTuple):
    """What `build_shards` wrote."""

    files: list[dict]  # the shard entries, for the manifest
    rows: dict[str, int]  # rows per split (the game split only when it has rows)
    board_encoding: str  # what the board column holds (`shards.BOARD_ENCODINGS`)
    unique_pairs: dict[str, int]  # per source: the rows it alone would give


def build_shards(paths: Sequence[Path], out_dir: Path, game: str,
                 settings: BuildSettings = BuildSettings()) -> BuiltShards:
    """Deduplicate, split and write the shards of the intermediates at `paths` into
    `out_dir`. Nothing is committed: the manifest does that.

    Go boards are written as the intermediates hold them, packed (`PACKED_BOARDS`): the
    build sorts and merges them packed, and unpacking them only to encode four times the
    bytes cost more than the rest of the writing (the loader unpacks them per row group).

    Each source's unique pairs (the rows that source alone would give) are counted from the
    merged stream: the rows of a source that merge are exactly the rows that would merge in
    a build of that source alone (same board, move and held-out flag), so a source counts
    once in each merged pair it has rows in."""
    unique: Counter[str] = Counter()
    packed = False
    if paths:
        schema = SELFPLAY_SCHEMA if _selfplay(list(paths)) else PAIR_SCHEMA
        batches, packed = _sorted_batches(list(paths), game, settings, unique)
        files = write_sorted_shards(batches, Path(out_dir), schema)
    else:
        files = write_sorted_shards([], Path(out_dir))
    rows = {split: sum(f["rows"] for f in files if f["split"] == split) for split in SPLITS}
    if not rows[GAME_SPLIT]:
        del rows[GAME_SPLIT]
    logger.info("wrote %d shard(s): %s", len(files), rows)
    return BuiltShards(files, rows, PACKED_BOARDS if packed else PLAIN_BOARDS,
                       dict(sorted(unique.items())))


__all__ = ["DEFAULT_MEMORY_LIMIT", "HOLDOUT_GAMES", "MIN_TRAIN_OCCURRENCES", "BuildSettings",
           "BuiltShards", "build_shards", "sorted_pairs"]
