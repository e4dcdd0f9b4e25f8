"""A split's rows on disk: which row groups (units) it has, and reading one.

`plan_split` checks a split's shards against the manifest (presence, schema version, columns,
row counts, one board size and one game) and lists its units, the non-empty (file, row group)
pairs; `split_for_ranks` cuts row groups into parts when ranks would otherwise get too few;
`read_unit` reads one unit's boards (unpacked where the shards store them packed), moves
(and results) as numpy arrays, checked. A `SplitPlan` is small and picklable (no open
files), so loader workers get a copy of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from services.dataset.shards import (
    PLAIN_BOARDS,
    POLICY_TARGET,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    DatasetError,
    board_bytes,
    board_encoding,
    decoded_boards,
    has_policy_targets,
    known_games,
    read_manifest,
)
from services.games.registry import default_game, get_game

DEFAULT_GAME = default_game().name


@dataclass(frozen=True)
class SplitPlan:
    """What a worker needs to find its rows: small and picklable (no open files)."""

    paths: tuple[str, ...]
    unit_file: np.ndarray  # int64 [units]: index into paths
    unit_group: np.ndarray  # int64 [units]: row group inside the file
    unit_rows: np.ndarray  # int64 [units]
    unit_start: np.ndarray  # int64 [units]: id of the unit's first row (cumulative rows)
    board_size: int
    game: str = DEFAULT_GAME  # a registered game name (shards.known_games)
    # a unit that is a part of its row group (`split_for_ranks`): its first row inside the
    # group, and the group's rows; None: every unit is a whole row group
    unit_offset: np.ndarray | None = None
    unit_group_rows: np.ndarray | None = None
    # what the board column's bytes are (`shards.BOARD_ENCODINGS`, the manifest's): packed
    # boards are unpacked as each row group is read
    board_encoding: str = PLAIN_BOARDS
    # the shards carry self-play policy targets (`shards.POLICY_TARGET`): every shard or none
    policy_targets: bool = False

    @property
    def rows(self) -> int:
        return int(self.unit_rows.sum())

    @property
    def channels(self) -> int:
        """Compact planes per board: 1 (Gomoku cells) or 4 (Go): the game's input planes."""
        return get_game(self.game).input_planes or 1

    @property
    def row_bytes(self) -> int:
        """Bytes of one board as the loader delivers it (every plane, unpacked)."""
        return self.channels * self.board_size * self.board_size

    @property
    def stored_bytes(self) -> int:
        """Bytes of one board as the shards store it (`board_encoding`)."""
        return board_bytes(self.board_encoding, self.channels, self.board_size)

    @property
    def n_moves(self) -> int:
        """Policy outputs: every point, plus a pass in a game with one (Go)."""
        return get_game(self.game).policy_size(self.board_size)


def _column_values(pf: pq.ParquetFile, path: Path, name: str) -> set:
    """Distinct values of a column in a shard, from row-group statistics (min and max: enough
    to see a second value) or, where they are absent, from the column itself."""
    meta = pf.metadata
    column = pf.schema_arrow.get_field_index(name)
    if column < 0:
        raise DatasetError(f"{path}: no {name!r} column")
    values: set = set()
    for rg in range(meta.num_row_groups):
        if meta.row_group(rg).num_rows == 0:
            continue
        stats = meta.row_group(rg).column(column).statistics
        if stats is None or not stats.has_min_max:
            return set(pc.unique(pf.read(columns=[name]).column(0)).to_pylist())
        values.update({stats.min, stats.max})
    return values


def _board_size_of(pf: pq.ParquetFile, path: Path) -> set[int]:
    """Board sizes in a shard (see `_column_values`)."""
    return {int(v) for v in _column_values(pf, path, "board_size")}


def _game_of(pf: pq.ParquetFile, path: Path) -> set[str]:
    """Games in a shard (see `_column_values`); values are bytes in some statistics."""
    return {v.decode() if isinstance(v, bytes) else str(v)
            for v in _column_values(pf, path, "game")}


def plan_split(dataset_dir: Path, split: str) -> SplitPlan:
    """Check the split's shards (presence, schema version, columns, row counts) and list units."""
    manifest_path = dataset_dir / "manifest.json"
    manifest = read_manifest(dataset_dir)
    entries = [e for e in manifest.get("files", []) if e.get("split") == split]
    if not entries:
        raise DatasetError(f"{manifest_path}: split {split!r} has no shards")
    paths: list[str] = []
    unit_file, unit_group, unit_rows = [], [], []
    sizes: dict[int, str] = {}
    games: dict[str, str] = {}
    targets: dict[bool, str] = {}
    for entry in entries:
        path = dataset_dir / entry["path"]
        if not path.is_file():
            raise DatasetError(f"{path}: shard listed in the manifest is missing")
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as e:
            raise DatasetError(f"{path}: not a readable Parquet file ({e})") from e
        try:
            schema = pf.schema_arrow
            version = (schema.metadata or {}).get(SCHEMA_KEY)
            if version != str(SCHEMA_VERSION).encode():
                raise DatasetError(
                    f"{path}: schema version {version!r}, expected {SCHEMA_VERSION}")
            for name, ok in (("board", is_binary), ("move", pa.types.is_integer)):
                index = schema.get_field_index(name)
                if index < 0 or not ok(schema.field(index).type):
                    found = schema.field(index).type if index >= 0 else "missing"
                    raise DatasetError(f"{path}: column {name!r} is {found}")
            targets.setdefault(has_policy_targets(schema), str(path))
            meta = pf.metadata
            if "rows" in entry and meta.num_rows != entry["rows"]:
                raise DatasetError(
                    f"{path}: {meta.num_rows} rows, the manifest says {entry['rows']}")
            for size in _board_size_of(pf, path):
                sizes.setdefault(size, str(path))
            for game in _game_of(pf, path):
                games.setdefault(game, str(path))
            for rg in range(meta.num_row_groups):
                rows = meta.row_group(rg).num_rows
                if rows:
                    unit_file.append(len(paths))
                    unit_group.append(rg)
                    unit_rows.append(rows)
        except (pa.ArrowException, OSError) as e:
            raise DatasetError(f"{path}: unreadable metadata ({e})") from e
        finally:
            pf.close()
        paths.append(str(path))
    if not unit_rows:
        raise DatasetError(f"{manifest_path}: split {split!r} is empty "
                           f"(0 rows in {len(entries)} shard(s))")
    if len(sizes) != 1:
        where = ", ".join(f"{s} in {p}" for s, p in sorted(sizes.items()))
        raise DatasetError(f"{manifest_path}: split {split!r} mixes board sizes ({where})")
    if len(games) != 1 or not set(games) <= set(known_games()):
        where = ", ".join(f"{g!r} in {p}" for g, p in sorted(games.items()))
        raise DatasetError(f"{manifest_path}: split {split!r} must hold one game of "
                           f"{known_games()}, found {where}")
    if len(targets) != 1:
        raise DatasetError(f"{manifest_path}: split {split!r} mixes shards with policy targets "
                           f"({targets[True]}) and without ({targets[False]})")
    game = next(iter(games))
    if manifest.get("game", game) != game:
        raise DatasetError(f"{manifest_path}: says game {manifest['game']!r}, but the shards "
                           f"of split {split!r} hold {game!r} rows ({games[game]})")
    rows = np.asarray(unit_rows, dtype=np.int64)
    return SplitPlan(paths=tuple(paths), unit_file=np.asarray(unit_file, dtype=np.int64),
                 unit_group=np.asarray(unit_group, dtype=np.int64), unit_rows=rows,
                 unit_start=np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64),
                 board_size=next(iter(sizes)), game=game,
                 board_encoding=board_encoding(manifest, manifest_path),
                 policy_targets=next(iter(targets)))


# a multi-rank plan has at least this many units per rank (row groups cut into parts if need be)
MIN_UNITS_PER_RANK = 4


def split_for_ranks(plan: SplitPlan, world_size: int) -> SplitPlan:
    """With fewer than `MIN_UNITS_PER_RANK` units per rank, each row group cut into equal
    consecutive parts (units of their own) until there are that many: ranks shard by unit,
    and a split of a few row groups (a small dataset: 65,536 rows a group) would otherwise
    leave ranks with no rows, or with far fewer than others, and every rank stops its epoch
    at the fewest. A part is read as its whole row group, then sliced (more reading, on small
    data only). One rank, or enough row groups: the plan as it is."""
    units = len(plan.unit_rows)
    if world_size == 1 or units >= MIN_UNITS_PER_RANK * world_size:
        return plan
    parts = -(-MIN_UNITS_PER_RANK * world_size // units)
    unit_file, unit_group, unit_rows, unit_offset, group_rows = [], [], [], [], []
    for u in range(units):
        rows = int(plan.unit_rows[u])
        cuts = np.linspace(0, rows, min(parts, rows) + 1).astype(np.int64)
        for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            unit_file.append(plan.unit_file[u])
            unit_group.append(plan.unit_group[u])
            unit_rows.append(hi - lo)
            unit_offset.append(lo)
            group_rows.append(rows)
    rows = np.asarray(unit_rows, dtype=np.int64)
    return SplitPlan(paths=plan.paths, unit_file=np.asarray(unit_file, dtype=np.int64),
                 unit_group=np.asarray(unit_group, dtype=np.int64), unit_rows=rows,
                 unit_start=np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64),
                 board_size=plan.board_size, game=plan.game,
                 unit_offset=np.asarray(unit_offset, dtype=np.int64),
                 unit_group_rows=np.asarray(group_rows, dtype=np.int64),
                 board_encoding=plan.board_encoding, policy_targets=plan.policy_targets)


def dataset_game(dataset_dir: str | Path, split: str = "train") -> tuple[str, int]:
    """(game, board size) of a dataset's split, from its shards: what a trainer or flow needs
    to pick a model configuration before reading any rows."""
    plan = plan_split(Path(dataset_dir), split)
    return plan.game, plan.board_size


def is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def board_matrix(column: pa.ChunkedArray | pa.Array, cells: int,
                 where: str = "board") -> np.ndarray:
    """int8 [n, cells] view of a binary column whose values are all `cells` bytes long.

    No per-row Python: the array's offsets are checked to be evenly spaced, then its data
    buffer is viewed in place (the view keeps the Arrow buffer alive).
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    n = len(column)
    if column.null_count:
        raise DatasetError(f"{where}: {column.null_count} null board(s)")
    if n == 0:
        return np.zeros((0, cells), dtype=np.int8)
    if not is_binary(column.type):
        raise DatasetError(f"{where}: board column is {column.type}, expected binary")
    _, offsets_buf, data_buf = column.buffers()
    width = 8 if pa.types.is_large_binary(column.type) else 4
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if width == 8 else np.int32,
                            count=n + 1, offset=column.offset * width)
    first = int(offsets[0])
    if int(offsets[-1]) - first != n * cells or np.any(np.diff(offsets) != cells):
        lengths = np.unique(np.diff(offsets))
        raise DatasetError(f"{where}: boards must all be {cells} bytes, found lengths "
                           f"{lengths[:5].tolist()}")
    return np.frombuffer(data_buf, dtype=np.int8, count=n * cells, offset=first).reshape(n, cells)


def policy_targets(table: pa.Table, moves: np.ndarray, n_moves: int,
                   where: str = "policy_target") -> np.ndarray:
    """float32 [n, n_moves]: each row's policy target as a distribution. A self-play row's
    visit counts (`shards.POLICY_TARGET`) normalised; a self-play row without them (a fast
    search: value target only) all zero, so it adds no policy loss; a row of shards without
    the column (records' pairs) the played move, one-hot."""
    n = len(moves)
    out = np.zeros((n, n_moves), np.float32)
    if POLICY_TARGET not in table.column_names:
        out[np.arange(n), moves] = 1.0
        return out
    column = table.column(POLICY_TARGET).combine_chunks()
    valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), bool)
    rows = np.flatnonzero(valid)
    if len(rows):
        present = column.filter(pa.array(valid))
        lengths = np.diff(present.offsets.to_numpy())
        if (lengths != n_moves).any():
            raise DatasetError(f"{where}: policy targets must hold {n_moves} entries, found "
                               f"{np.unique(lengths)[:5].tolist()}")
        visits = present.flatten().to_numpy(zero_copy_only=False).reshape(len(rows), n_moves)
        if (visits < 0).any():
            raise DatasetError(f"{where}: negative visit counts")
        totals = visits.sum(axis=1, keepdims=True).astype(np.float64)
        out[rows] = np.divide(visits, totals, out=np.zeros(visits.shape), where=totals > 0)
    return out


def read_unit(plan: SplitPlan, unit: int, results: bool = False,
              targets: bool = False, game_ids: bool = False) -> list:
    """Boards int8 [n, channels*s*s] and moves int64 [n] of one row group, then with
    `results` the mover's results float32 [n] (NaN where unknown), then with `targets` the
    policy targets float32 [n, n_moves] (`policy_targets`), then with `game_ids` the rows'
    `game_id` column (an Arrow array: the loader's value sampling)."""
    path = plan.paths[plan.unit_file[unit]]
    rg = int(plan.unit_group[unit])
    where = f"{path}: row group {rg}"
    try:
        # checksums are verified where the writer stored them
        pf = pq.ParquetFile(path, page_checksum_verification=True)
        try:
            columns = ["board", "move", "result"] if results else ["board", "move"]
            if targets and plan.policy_targets:
                columns.append(POLICY_TARGET)
            if game_ids:
                columns.append("game_id")
            table = pf.read_row_group(rg, columns=columns, use_threads=False)
        finally:
            pf.close()
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{where}: cannot be read ({e})") from e
    expected = plan.unit_rows[unit] if plan.unit_group_rows is None else \
        plan.unit_group_rows[unit]
    if table.num_rows != expected:
        raise DatasetError(f"{where}: {table.num_rows} rows, expected {expected} "
                           "(file changed since the loader was created?)")
    if plan.unit_offset is not None:  # a part of the row group
        table = table.slice(int(plan.unit_offset[unit]), int(plan.unit_rows[unit]))
    boards = decoded_boards(board_matrix(table.column("board"), plan.stored_bytes, where),
                            plan.board_encoding, plan.board_size)
    move_col = table.column("move")
    if move_col.null_count:
        raise DatasetError(f"{where}: {move_col.null_count} null move(s)")
    moves = move_col.to_numpy()
    if moves.min() < 0 or moves.max() >= plan.n_moves:
        raise DatasetError(f"{where}: move outside 0..{plan.n_moves - 1} "
                           f"(min {moves.min()}, max {moves.max()})")
    cols = [boards, moves.astype(np.int64)]
    if results:
        cols.append(table.column("result").to_numpy(zero_copy_only=False).astype(np.float32))
    if targets:
        cols.append(policy_targets(table, cols[1], plan.n_moves, where))
    if game_ids:
        cols.append(table.column("game_id"))
    return cols
