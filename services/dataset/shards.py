"""Parquet shards of deduplicated (position, move) pairs, plus the manifest that describes them.

Layout of a dataset folder:
    manifest.json                    rows, split sizes, checksums, sources, schema version
    train-00000.<sha12>.parquet ...  one or more shards per split, rows sorted by position hash
    quarantine.<sha12>.parquet       every record that could not be ingested, with its reason

The manifest is the only file with a fixed name and the single commit point of a dataset
version. Every other file is named after its content (the first 12 hex digits of its
SHA-256), so writing a new version never overwrites a file that the current manifest lists:

1. shards and quarantine are written to a temporary name, fsynced and renamed (a reader never
   sees half a file); a file whose content-addressed name already exists is left untouched;
2. the new manifest is written the same way (temp + rename): from that instant readers see the
   new version, and until then the old manifest and all of its files are intact;
3. only then are the files the new manifest does not list (stale shards, an old quarantine,
   left-over `.*.tmp` files of a killed run) removed.

A run killed at any point therefore leaves either the old version or the new one, plus files
that the next run either reuses (same content, same name) or removes, and shard bytes depend
only on the input (rows sorted by (position hash, move, board), fixed writer options, pinned
pyarrow): a rerun on the same inputs reproduces identical files and changes nothing. One
writer per dataset folder at a time is assumed (the flow does not lock the folder).

Row groups of 65,536 rows (`ROW_GROUP_ROWS`). A row group is the unit the training loader
(`services/dataset/loader.py`) permutes, deals out to workers and ranks and reads in one call, so
its size trades shuffle quality and parallelism against per-group overhead. 65,536 rows of 15x15
boards are about 15 MB uncompressed (24 MB for 19x19 Go) and about 4.5 MB in LZ4 (about 70 bytes a
row; `BOARD_CODEC` says why not zstd); one group is what a loader worker reads at a time next to
its shuffle buffer (65,536 rows by default), so memory stays bounded at any dataset size. Large
groups compress well (the codec sees many similar boards, and per-group statistics and page headers
are a negligible share of the file), and reading one is a single sequential read. Smaller groups
would give the loader more units to spread over `world_size * num_workers` workers and a finer
first-level shuffle, but cost compression, footer size and read calls; much larger ones would raise
every worker's memory and leave workers idle on small splits (fewer units than workers), and a unit
larger than the shuffle buffer mixes less with the others. A 1,000,000-row shard (`ROWS_PER_SHARD`)
holds 16 groups, so even one shard gives 16 units to spread over the loader's workers.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from services import atomic_files
from services.checksums import sha256_file
from services.games.go.features import COMPACT_CHANNELS
from services.games.registry import default_game, get_game, registered_games

SCHEMA_VERSION = 2  # 2: game, rule, result, mover_rank; Go boards as compact planes
SCHEMA_KEY = b"movepred.schema_version"
# train / validation / test split positions (each position wholly in one; see
# services/dataset/dedup.py); game_test holds every position of a few held-out games, shared
# openings included, the figure a game-level evaluation gives
POSITION_SPLITS = ("train", "validation", "test")
GAME_SPLIT = "game_test"
SPLITS = (*POSITION_SPLITS, GAME_SPLIT)
ROWS_PER_SHARD = 1_000_000
ROW_GROUP_ROWS = 65_536  # ~15 MB of boards, ~4.5 MB in LZ4: see the module docstring
# The board column is what the training loader decompresses for every row it delivers: LZ4
# reads in about half the CPU time of zstd (246 against 507 ns a 15x15 row, measured with
# pyarrow 22) for about twice the bytes (69 against 37 a row), which keeps the loader at 1M
# positions per CPU-second with augmentation (benchmarks/loader.py). Other columns: zstd.
BOARD_CODEC = "lz4"
OTHER_CODEC = "zstd"
# what the manifest's writer.compression says: the codec of each column as written
COMPRESSION = {"board": BOARD_CODEC, "other columns": OTHER_CODEC}
# What the board column's bytes are (the manifest's writer.board_encoding). PLAIN: the int8
# cells or compact planes themselves (Gomoku). PACKED: Go's compact planes packed
# (`services.games.go.replay.pack_planes`: each plane's cells as digits, 5 / 3 / 3 / 8 to a
# byte, 361 bytes at 19x19 against 1,444), unpacked by the readers here and in the loader.
# Why packed: the build sorts and merges packed boards anyway, and writing them as they are
# spares unpacking (~0.5 CPU-s a million positions) and LZ4 of four times the bytes (~1 CPU-s);
# the loader unpacks a row group per read. A manifest without the field holds PLAIN boards.
PLAIN_BOARDS = "plain"
PACKED_BOARDS = "packed"
BOARD_ENCODINGS = (PLAIN_BOARDS, PACKED_BOARDS)
MANIFEST = "manifest.json"
# files this module writes into a dataset folder (fixed names of older versions included):
# the only ones `remove_unlisted` may delete
_OWNED = re.compile(
    r"^(?:(?:train|validation|test|game_test)-\d{5}|quarantine)(?:\.[0-9a-f]{12})?\.parquet$"
    r"|^\..+\.tmp$"
)

def known_games() -> tuple[str, ...]:
    """The `game` column's values: every game registered now (one registered after this
    module's import too)."""
    return tuple(g.name for g in registered_games())


GO_CHANNELS = COMPACT_CHANNELS

PAIR_SCHEMA = pa.schema(
    [
        # canonical position, int8 bytes: Gomoku size*size cells (0 empty, 1 black, 2 white);
        # Go the compact [4, size, size] planes of services/games/go/features.py, packed
        # where the manifest's writer.board_encoding says so (`PACKED_BOARDS`)
        ("board", pa.binary()),
        ("move", pa.int16()),  # canonical next move, y * size + x; Go: size*size = pass
        ("game", pa.string()),  # the registered game name (services.games.registry)
        ("rule", pa.string()),  # the record's rule ("" when it names none)
        ("board_size", pa.int8()),
        ("to_move", pa.int8()),
        ("ply", pa.int16()),  # smallest ply at which this pair occurred
        ("count", pa.int32()),  # how many times the pair occurred in the sources
        ("position_hash", pa.uint64()),  # symmetry-invariant Zobrist hash of the board
        ("result", pa.float32()),  # mover's result: 1 won, 0 lost, 0.5 draw (mean); NaN unknown
        ("mover_rank", pa.string()),  # the mover's rank where the record has it (smallest)
        ("game_id", pa.string()),  # one game where it occurred (smallest id)
        ("source", pa.string()),
        ("split", pa.string()),
    ],
    metadata={SCHEMA_KEY: str(SCHEMA_VERSION).encode()},
)

# Self-play datasets (`services.selfplay.pairs`, docs/selfplay.md): the same columns, then
# each row's policy target and lineage. Rows are never merged (count 1): two visits of one
# position carry different targets. `policy_target` holds the root's visit counts over the
# game's policy points (every point, then the pass where the game has one), in the row's
# canonical symmetry image; null on a fast-search row (value target only).
POLICY_TARGET = "policy_target"
SELFPLAY_COLUMNS = (
    (POLICY_TARGET, pa.list_(pa.int32())),
    ("full", pa.bool_()),  # a full search (its visits are the policy target) or a fast one
    ("visits", pa.int32()),  # the root's visits when the move was chosen
    ("model_name", pa.string()),  # the network that played the game
    ("model_version", pa.string()),
    ("seed", pa.int64()),  # the game's seed: the game replays from it
    ("opening", pa.list_(pa.int16())),  # the opening's moves, as played (not canonical)
)
SELFPLAY_SCHEMA = pa.schema([*PAIR_SCHEMA, *(pa.field(n, t) for n, t in SELFPLAY_COLUMNS)],
                            metadata=PAIR_SCHEMA.metadata)


def has_policy_targets(schema: pa.Schema) -> bool:
    """Whether rows of this schema carry self-play policy targets (and lineage)."""
    return schema.get_field_index(POLICY_TARGET) >= 0


QUARANTINE_SCHEMA = pa.schema(
    [("source", pa.string()), ("record_id", pa.string()), ("reason", pa.string()),
     ("snippet", pa.string())]
)


class DatasetError(ValueError):
    """A dataset folder or shard that cannot be used; the message names the file."""


# Columns whose values are nearly all distinct: no dictionary (Parquet would build one for
# the first page of each column chunk and then fall back to plain values; plain values
# compress better here), no min/max statistics (nobody prunes on them; the loader reads
# `game` and `board_size` statistics). `game_id` keeps its dictionary: a game gives a row
# group tens to hundreds of rows (one per position it holds the smallest id of), so its
# dictionary pages and indices are written and read faster than the plain strings (real Go
# archives: 0.09 CPU-s less to write, 6 % smaller shards); past the dictionary page limit
# (1 MB of ids in one row group) Parquet falls back to plain values by itself
_NO_DICTIONARY = frozenset({"board", "position_hash"})
_NO_STATISTICS = frozenset({"board", "game_id"})


def parquet_options(schema: pa.Schema) -> dict:
    """The fixed `pq.write_table` options of every file written here (they and the pinned
    pyarrow make the bytes reproducible): zstd, but LZ4 for the board column (`BOARD_CODEC`),
    row groups of ROW_GROUP_ROWS, dictionary encoding and statistics for every column but the
    high-cardinality ones."""
    names = schema.names
    return {
        "compression": {c: BOARD_CODEC if c == "board" else OTHER_CODEC for c in names},
        "row_group_size": ROW_GROUP_ROWS, "store_schema": True,
        "use_dictionary": [c for c in names if c not in _NO_DICTIONARY],
        "write_statistics": [c for c in names if c not in _NO_STATISTICS],
    }


def _parquet_buffer(table: pa.Table) -> memoryview:
    """The table as Parquet with the fixed writer options that make the bytes reproducible:
    a view of the buffer the file was written into (no copy)."""
    options = parquet_options(table.schema)
    # one buffer of a bound's size (the encoded table is far smaller than the Arrow one), of
    # which only the pages written to are ever touched; a growing BufferOutputStream copies
    # everything it holds at each doubling
    try:
        buffer = pa.allocate_buffer(table.nbytes + table.nbytes // 2 + (1 << 20))
        sink = pa.FixedSizeBufferWriter(buffer)
        pq.write_table(table, sink, **options)
    except (MemoryError, OSError, pa.ArrowException):  # beyond the bound: a growing buffer
        stream = pa.BufferOutputStream()
        pq.write_table(table, stream, **options)
        return memoryview(stream.getvalue())
    return memoryview(buffer)[:sink.tell()]


def write_table_atomic(table: pa.Table, path: Path) -> str:
    """Write `table` to `path` atomically; return the file's SHA-256."""
    data = _parquet_buffer(table)
    atomic_files.atomic_write_bytes(data, path)
    return hashlib.sha256(data).hexdigest()


def _write_content_addressed(table: pa.Table, out_dir: Path, stem: str) -> dict:
    """Write `table` as `<stem>.<sha12>.parquet` unless that very file is already there."""
    data = _parquet_buffer(table)
    sha = hashlib.sha256(data).hexdigest()
    path = out_dir / f"{stem}.{sha[:12]}.parquet"
    if not (path.exists() and path.stat().st_size == len(data) and sha256_file(path) == sha):
        atomic_files.atomic_write_bytes(data, path)
    return {"path": path.name, "rows": table.num_rows, "sha256": sha}


def _json_bytes(obj: dict) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def atomic_write_json(obj: dict, path: Path) -> None:
    atomic_files.atomic_write_bytes(_json_bytes(obj), path)


def with_pair_columns(table: pa.Table) -> pa.Table:
    """`table` with every PAIR_SCHEMA column, in order, cast to its type. Columns that
    Gomoku's `deduplicate` does not produce get their Gomoku defaults: the default game, rule "",
    result NaN (unknown), mover_rank ""."""
    n = table.num_rows
    defaults = {"game": lambda: pa.repeat(pa.scalar(default_game().name, pa.string()), n),
                "rule": lambda: _empty_strings(n),
                "result": lambda: pa.array(np.full(n, np.nan, np.float32), pa.float32()),
                "mover_rank": lambda: _empty_strings(n)}
    for name, column in defaults.items():
        if name not in table.column_names:
            table = table.append_column(name, column())
    return table.select(PAIR_SCHEMA.names).cast(PAIR_SCHEMA)


def _empty_strings(n: int) -> pa.Array:
    """n empty strings: offsets that are all 0 (np.zeros: pages the kernel maps to zeros
    without writing them), no data."""
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)),
                                                  pa.py_buffer(b"")])


_SORT_KEYS = [("position_hash", "ascending"), ("move", "ascending"), ("board", "ascending")]


def split_parts(table: pa.Table) -> list[tuple[str, pa.Table]]:
    """(split, its rows sorted by (position hash, move, board)) for each of SPLITS; rows of
    other splits are left out.

    A table already in that order (grouped by split in SPLITS order, sorted inside each, as
    `deduplicate` returns it) is only sliced, without a copy; any other is filtered and
    sorted (a split that happens to be in order is not sorted again).
    """
    codes = pc.index_in(table["split"], value_set=pa.array(SPLITS, pa.string()))
    if codes.null_count == 0:
        codes = codes.to_numpy()
        if len(codes) < 2 or bool((codes[1:] >= codes[:-1]).all()):
            bounds = np.searchsorted(codes, np.arange(len(SPLITS) + 1)).tolist()
            parts = [table.slice(bounds[i], bounds[i + 1] - bounds[i])
                     for i in range(len(SPLITS))]
            if all(_in_shard_order(part) for part in parts):
                return list(zip(SPLITS, parts, strict=True))
    out = []
    for split in SPLITS:
        part = table.filter(pc.equal(table["split"], split))
        if not _in_shard_order(part):
            part = part.sort_by(_SORT_KEYS)
        out.append((split, part))
    return out


def _in_shard_order(part: pa.Table) -> bool:
    """Whether `part` is sorted by (position hash, move, board), so that a stable sort would
    leave it as it is: no nulls in those columns, each row's key at most the next one's."""
    if part.num_rows < 2:
        return True
    columns = [part[name] for name, _ in _SORT_KEYS]
    if any(c.null_count for c in columns):
        return False
    hashes, moves = (np.asarray(c.to_numpy()) for c in columns[:2])
    hash_equal = hashes[1:] == hashes[:-1]
    if not (hash_equal | (hashes[1:] > hashes[:-1])).all():
        return False
    move_equal = moves[1:] == moves[:-1]
    if not (~hash_equal | move_equal | (moves[1:] > moves[:-1])).all():
        return False
    tied = np.flatnonzero(hash_equal & move_equal)  # (rare) the board bytes decide
    if len(tied):
        boards = columns[2]
        this, following = boards.take(pa.array(tied)), boards.take(pa.array(tied + 1))
        if not pc.all(pc.less_equal(this, following)).as_py():
            return False
    return True


def shard_piece(part: pa.Table, i: int) -> pa.Table:
    """Rows of shard `i` of a split's part, one chunk per column (a copy only of a column in
    several): Parquet's page boundaries follow the chunks, and the bytes must not depend on
    how the input was chunked."""
    return part.slice(i * ROWS_PER_SHARD, ROWS_PER_SHARD).combine_chunks().cast(PAIR_SCHEMA)


def write_split_shards(table: pa.Table, out_dir: Path) -> list[dict]:
    """Write `table` (already deduplicated) as shards per split; return one entry per file.

    Missing Gomoku-only defaults are filled in (`with_pair_columns`). Each split's rows are
    sorted by (position hash, move, board) (`split_parts`).

    Files are content-addressed and nothing is removed: list the entries in a manifest
    (`commit_manifest`) to make them the dataset's current version.
    """
    table = with_pair_columns(table)
    return write_sorted_shards((part for _, part in split_parts(table)), out_dir)


class _ShardFile:
    """One shard being written row group by row group to a temporary file; `close` names it
    after its content (`<stem>.<sha12>.parquet`), leaving an identical file in place."""

    def __init__(self, out_dir: Path, stem: str, schema: pa.Schema = PAIR_SCHEMA) -> None:
        self.out_dir, self.stem, self.rows = out_dir, stem, 0
        self.tmp = atomic_files.temporary_name(out_dir / stem)
        options = parquet_options(schema)
        options.pop("row_group_size")
        self.writer = pq.ParquetWriter(self.tmp, schema, **options)

    def write(self, group: pa.Table) -> None:
        """One row group (one chunk per column, as `shard_piece` gives a whole shard: the
        pages, hence the bytes, do not depend on how the input was chunked)."""
        group = group.combine_chunks()
        self.writer.write_table(group, row_group_size=ROW_GROUP_ROWS)
        self.rows += group.num_rows

    def close(self) -> dict:
        try:
            self.writer.close()
            sha = sha256_file(self.tmp)
            path = self.out_dir / f"{self.stem}.{sha[:12]}.parquet"
            if not (path.exists() and path.stat().st_size == self.tmp.stat().st_size
                    and sha256_file(path) == sha):
                atomic_files.place_file(self.tmp, path)
        finally:
            self.tmp.unlink(missing_ok=True)
        return {"path": path.name, "rows": self.rows, "sha256": sha}

    def abort(self) -> None:
        try:
            self.writer.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def write_sorted_shards(parts: Iterable[pa.Table | pa.RecordBatch], out_dir: Path,
                        schema: pa.Schema = PAIR_SCHEMA) -> list[dict]:
    """Stream rows into shards: `parts` (tables or record batches with every column of
    `schema`: PAIR_SCHEMA, or SELFPLAY_SCHEMA for self-play rows) come grouped by split in
    SPLITS order and sorted inside each split by (position hash, move, board), as the shards
    store them. Memory: one row group and one input part.

    Each split gets `ROWS_PER_SHARD`-row shards of `ROW_GROUP_ROWS`-row groups, and at least
    one (empty) shard for a position split without rows; the game split gets none then.
    Returns one entry per file, in order; files are content-addressed (see
    `write_split_shards`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[dict] = []
    state: dict = {"split": -1, "shard": None, "index": 0}
    pending: list[pa.Table] = []

    def close_shard() -> None:
        shard = state["shard"]
        if shard is not None:
            entry = shard.close()
            files.append({"path": entry["path"], "split": SPLITS[state["split"]],
                          "rows": entry["rows"], "sha256": entry["sha256"]})
            state["shard"] = None

    def write_group(group: pa.Table) -> None:
        if state["shard"] is None:
            state["shard"] = _ShardFile(out_dir, f"{SPLITS[state['split']]}-{state['index']:05d}",
                                        schema)
            state["index"] += 1
        state["shard"].write(group)
        if state["shard"].rows >= ROWS_PER_SHARD:
            close_shard()

    def flush(final: bool) -> None:
        """Write whole row groups from `pending` (and the rest as a last one when final)."""
        rows = sum(t.num_rows for t in pending)
        while rows and (final or rows >= ROW_GROUP_ROWS):
            done = state["shard"].rows if state["shard"] is not None else 0
            take = min(ROW_GROUP_ROWS, ROWS_PER_SHARD - done, rows)
            joined = pa.concat_tables(pending)
            write_group(joined.slice(0, take))
            rest = joined.slice(take)
            pending[:] = [rest] if rest.num_rows else []
            rows -= take

    def enter(split: int) -> None:
        """Finish the current split, then give each position split skipped on the way (no
        rows) its one empty shard."""
        flush(final=True)
        if state["split"] >= 0 and state["index"] == 0 and \
                SPLITS[state["split"]] in POSITION_SPLITS:
            write_group(schema.empty_table())
        close_shard()
        for skipped in range(state["split"] + 1, split):
            state["split"], state["index"] = skipped, 0
            if SPLITS[skipped] in POSITION_SPLITS:
                write_group(schema.empty_table())
                close_shard()
        state["split"], state["index"] = split, 0

    try:
        for part in parts:
            if part.num_rows == 0:
                continue
            table = part if isinstance(part, pa.Table) else pa.Table.from_batches([part])
            table = table.select(schema.names).cast(schema)
            codes = pc.index_in(table["split"], value_set=pa.array(SPLITS, pa.string()))
            if codes.null_count:
                table = table.filter(pc.is_valid(codes))  # rows of other splits: left out
                codes = codes.drop_null()
            codes = codes.to_numpy(zero_copy_only=False)
            if len(codes) > 1 and (codes[1:] < codes[:-1]).any():
                raise ValueError("write_sorted_shards: rows must come grouped by split in "
                                 f"the order {SPLITS}")
            bounds = np.flatnonzero(np.diff(codes)) + 1
            for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(codes)],
                              strict=True):
                split = int(codes[lo])
                if split < state["split"]:
                    raise ValueError("write_sorted_shards: rows must come grouped by split in "
                                     f"the order {SPLITS}")
                if split != state["split"]:
                    enter(split)
                pending.append(table.slice(lo, hi - lo))
                flush(final=False)
        enter(len(SPLITS))
    except BaseException:
        if state["shard"] is not None:
            state["shard"].abort()
        raise
    return files


def write_quarantine(rows: Iterable[dict], out_dir: Path) -> dict:
    """Write the quarantine rows (sorted) as `quarantine.<sha12>.parquet`; return its entry."""
    rows = sorted(rows, key=lambda r: (r["source"], r["record_id"], r["reason"], r["snippet"]))
    table = pa.Table.from_pylist(rows, schema=QUARANTINE_SCHEMA)
    out_dir.mkdir(parents=True, exist_ok=True)
    return _write_content_addressed(table, out_dir, "quarantine")


def listed_files(manifest: dict) -> set[str]:
    names = {entry["path"] for entry in manifest.get("files", [])}
    if manifest.get("quarantine"):
        names.add(manifest["quarantine"]["path"])
    return names


def remove_unlisted(out_dir: Path, manifest: dict) -> list[str]:
    """Delete the shard, quarantine and temporary files of `out_dir` that `manifest` does not
    list (never anything this module did not write); return their names."""
    keep = listed_files(manifest) | {MANIFEST}
    removed = []
    for path in sorted(Path(out_dir).iterdir()):
        if path.name not in keep and path.is_file() and _OWNED.match(path.name):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def commit_manifest(manifest: dict, out_dir: Path) -> list[str]:
    """Make `manifest` the dataset's current version, then remove what it no longer lists.

    Every file it lists must already be in place; stale files go only after the rename.
    """
    out_dir = Path(out_dir)
    missing = [name for name in sorted(listed_files(manifest)) if not (out_dir / name).exists()]
    if missing:
        raise DatasetError(f"{out_dir}: manifest lists missing file(s): {', '.join(missing)}")
    path = out_dir / MANIFEST
    if not (path.is_file() and path.read_bytes() == _json_bytes(manifest)):  # else: no-op
        atomic_write_json(manifest, path)
    return remove_unlisted(out_dir, manifest)


def manifest_sha256(dataset_dir: Path | str) -> str:
    """The sha256 of the dataset's manifest: which version of the dataset this is (a commit
    writes a new manifest), e.g. for a checkpoint to be resumed only on the data it began on."""
    path = Path(dataset_dir) / MANIFEST
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise DatasetError(f"{path}: unreadable manifest ({exc})") from None


def read_manifest(dataset_dir: Path) -> dict:
    """The dataset's manifest, checked: its schema version and board encoding are ones this
    reader knows (DatasetError naming the file otherwise)."""
    path = Path(dataset_dir) / MANIFEST
    if not path.exists():
        raise DatasetError(f"{path}: no manifest; run the ingest flow first")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: unreadable manifest ({exc}); run the ingest flow again") \
            from None
    if not isinstance(manifest, dict):
        raise DatasetError(f"{path}: not a manifest (a JSON object); run the ingest flow again")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise DatasetError(
            f"{path}: schema version {manifest.get('schema_version')}, expected {SCHEMA_VERSION}"
        )
    board_encoding(manifest, path)
    return manifest


def board_encoding(manifest: dict, where: Path | str = MANIFEST) -> str:
    """What the shards' board bytes are (`BOARD_ENCODINGS`), as the manifest's
    writer.board_encoding says; DatasetError for an encoding this reader does not know."""
    encoding = manifest.get("writer", {}).get("board_encoding", PLAIN_BOARDS)
    if encoding not in BOARD_ENCODINGS:
        raise DatasetError(f"{where}: board encoding {encoding!r} is not one this reader "
                           f"knows ({', '.join(BOARD_ENCODINGS)}); read it with the movepred "
                           "version that wrote it, or ingest the sources again")
    return encoding


def board_bytes(encoding: str, channels: int, size: int) -> int:
    """Bytes of one stored board: `channels` int8 planes of size x size, packed or not."""
    if encoding == PACKED_BOARDS:
        from services.games.go.replay import packed_width

        return packed_width(size)
    return channels * size * size


def decoded_boards(stored: np.ndarray, encoding: str, size: int) -> np.ndarray:
    """int8 [n, channels * size * size] plane bytes of stored boards (uint8 or int8 [n, width],
    as the board column holds them): PACKED ones unpacked into a buffer of Arrow's memory
    pool (reused from read to read rather than faulted in afresh), PLAIN ones as they are."""
    if encoding != PACKED_BOARDS:
        return stored
    from services.games.go.replay import unpack_planes

    n = len(stored)
    width = COMPACT_CHANNELS * size * size
    out = np.frombuffer(pa.allocate_buffer(n * width), np.uint8).reshape(n, width)
    unpack_planes(stored.view(np.uint8), size, out)
    return out.view(np.int8)


def read_split(dataset_dir: Path, split: str,
               results: bool = False) -> tuple[np.ndarray, ...]:
    """Boards int8, moves int64 [n] and plies int64 [n] of one split, then with `results` the
    movers' results float32 [n] (1 won, 0 lost, 0.5 draw, NaN unknown). Boards are [n, s, s]
    for a Gomoku dataset and [n, 4, s, s] (compact planes) for a Go one; a split must hold one
    game and one board size (the trainer reads one game at a time), else DatasetError."""
    dataset_dir = Path(dataset_dir)
    manifest = read_manifest(dataset_dir)
    parts = []
    kind: tuple[str, int, Path] | None = None  # (game, size, first file)
    for entry in manifest["files"]:
        if entry["split"] != split:
            continue
        path = dataset_dir / entry["path"]
        if not path.exists():
            raise DatasetError(f"{path}: shard listed in the manifest is missing")
        version = (pq.read_schema(path).metadata or {}).get(SCHEMA_KEY)
        if version != str(SCHEMA_VERSION).encode():
            found = version.decode(errors="replace") if version else "unknown"
            raise DatasetError(
                f"{path}: schema version {found}, expected {SCHEMA_VERSION}"
                + ("; ingest the sources again" if version is not None else ""))
        columns = ["game", "board", "move", "board_size", "ply"] + (["result"] if results else [])
        part = pq.read_table(path, columns=columns)
        if part.num_rows == 0:
            continue
        games = pc.unique(part["game"]).to_pylist()
        sizes = pc.unique(part["board_size"]).to_pylist()
        if len(games) != 1 or len(sizes) != 1 or games[0] not in known_games():
            raise DatasetError(f"{path}: mixes games {games} / board sizes {sizes}; a split "
                               f"must hold one game and one board size")
        if kind is None:
            kind = (games[0], int(sizes[0]), path)
        elif kind[:2] != (games[0], int(sizes[0])):
            raise DatasetError(f"{path}: {games[0]} {sizes[0]}x{sizes[0]} rows, but "
                               f"{kind[2].name} holds {kind[0]} {kind[1]}x{kind[1]}; a split "
                               f"must hold one game and one board size")
        parts.append(part)
    if kind is None:
        raise DatasetError(f"{dataset_dir}: split {split!r} is empty")
    table = pa.concat_tables(parts)
    game, size, _ = kind
    shape = (-1, *get_game(game).input_shape(size))
    encoding = board_encoding(manifest)
    width = board_bytes(encoding, get_game(game).input_planes or 1, size)
    stored = np.frombuffer(b"".join(table["board"].to_pylist()), dtype=np.uint8)
    if len(stored) != table.num_rows * width:
        raise DatasetError(f"{dataset_dir}: split {split!r}: boards are not all {width} bytes "
                           f"({encoding} {game} {size}x{size} boards)")
    stored = stored.reshape(table.num_rows, width)
    if encoding == PACKED_BOARDS:
        from services.games.go.replay import unpack_planes

        boards = unpack_planes(stored, size).view(np.int8).reshape(shape)
    else:
        boards = stored.view(np.int8).reshape(shape).copy()  # writable, owned by the caller
    if table["move"].null_count:
        raise DatasetError(f"{dataset_dir}: split {split!r}: {table['move'].null_count} null "
                           "move(s)")
    moves = table["move"].to_numpy().astype(np.int64)
    points = get_game(game).policy_size(size)
    if moves.min() < 0 or moves.max() >= points:  # as the train loader checks its rows
        raise DatasetError(f"{dataset_dir}: split {split!r}: move outside 0..{points - 1} "
                           f"(min {moves.min()}, max {moves.max()})")
    plies = table["ply"].to_numpy(zero_copy_only=False).astype(np.int64)
    if not results:
        return boards, moves, plies
    return boards, moves, plies, table["result"].to_numpy(zero_copy_only=False).astype(np.float32)
