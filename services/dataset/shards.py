"""Parquet shards of deduplicated (position, move) pairs, plus the manifest that describes them.

Layout of a dataset folder:
    manifest.json                 rows, checksums, sources, split counts, schema version
    train-00000.parquet ...       one or more shards per split, rows sorted by position hash
    quarantine.parquet            every record that could not be ingested, with its reason

Shards are written to a temporary name and renamed, so a reader never sees half a file, and
their bytes depend only on the input (sorted rows, fixed writer options): a rerun on the same
inputs reproduces identical files.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = 1
SCHEMA_KEY = b"movepred.schema_version"
SPLITS = ("train", "validation", "test")
ROWS_PER_SHARD = 1_000_000
ROW_GROUP_ROWS = 65_536  # ~15 MB of boards: large enough for zstd, small enough to shuffle

PAIR_SCHEMA = pa.schema(
    [
        ("board", pa.binary()),  # size*size int8 cells (0 empty, 1 black, 2 white), canonical
        ("move", pa.int16()),  # canonical next move, y * size + x
        ("board_size", pa.int8()),
        ("to_move", pa.int8()),
        ("ply", pa.int16()),  # smallest ply at which this pair occurred
        ("count", pa.int32()),  # how many times the pair occurred in the sources
        ("position_hash", pa.uint64()),  # symmetry-invariant Zobrist hash of the board
        ("game_id", pa.string()),  # one game where it occurred (smallest id)
        ("source", pa.string()),
        ("split", pa.string()),
    ],
    metadata={SCHEMA_KEY: str(SCHEMA_VERSION).encode()},
)

QUARANTINE_SCHEMA = pa.schema(
    [("source", pa.string()), ("record_id", pa.string()), ("reason", pa.string()),
     ("snippet", pa.string())]
)


class DatasetError(ValueError):
    """A dataset folder or shard that cannot be used; the message names the file."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _atomic_write_table(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(
        table, tmp, compression="zstd", row_group_size=ROW_GROUP_ROWS,
        write_statistics=True, store_schema=True,
    )
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_json(obj: dict, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def write_split_shards(table: pa.Table, out_dir: Path) -> list[dict]:
    """Write `table` (already deduplicated) as shards per split; return one entry per file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for split in SPLITS:
        part = table.filter(pa.compute.equal(table["split"], split))
        part = part.sort_by([("position_hash", "ascending"), ("move", "ascending"),
                             ("board", "ascending")])
        n_shards = max(1, -(-part.num_rows // ROWS_PER_SHARD))
        for i in range(n_shards):
            shard = part.slice(i * ROWS_PER_SHARD, ROWS_PER_SHARD).cast(PAIR_SCHEMA)
            path = out_dir / f"{split}-{i:05d}.parquet"
            _atomic_write_table(shard, path)
            files.append({"path": path.name, "split": split, "rows": shard.num_rows,
                          "sha256": sha256_file(path)})
    return files


def write_quarantine(rows: Iterable[dict], out_dir: Path) -> int:
    rows = sorted(rows, key=lambda r: (r["source"], r["record_id"], r["reason"]))
    table = pa.Table.from_pylist(rows, schema=QUARANTINE_SCHEMA)
    _atomic_write_table(table, out_dir / "quarantine.parquet")
    return table.num_rows


def read_manifest(dataset_dir: Path) -> dict:
    path = Path(dataset_dir) / "manifest.json"
    if not path.exists():
        raise DatasetError(f"{path}: no manifest; run the ingest flow first")
    manifest = json.loads(path.read_text())
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise DatasetError(
            f"{path}: schema version {manifest.get('schema_version')}, expected {SCHEMA_VERSION}"
        )
    return manifest


def read_split(dataset_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boards int8 [n, s, s], moves int64 [n] and plies int64 [n] of one split."""
    dataset_dir = Path(dataset_dir)
    manifest = read_manifest(dataset_dir)
    parts = []
    for entry in manifest["files"]:
        if entry["split"] != split:
            continue
        path = dataset_dir / entry["path"]
        if not path.exists():
            raise DatasetError(f"{path}: shard listed in the manifest is missing")
        version = (pq.read_schema(path).metadata or {}).get(SCHEMA_KEY)
        if version != str(SCHEMA_VERSION).encode():
            raise DatasetError(f"{path}: schema version {version!r}, expected {SCHEMA_VERSION}")
        parts.append(pq.read_table(path, columns=["board", "move", "board_size", "ply"]))
    if not parts or sum(p.num_rows for p in parts) == 0:
        raise DatasetError(f"{dataset_dir}: split {split!r} is empty")
    table = pa.concat_tables(parts)
    size = int(table["board_size"][0].as_py())
    flat = np.frombuffer(b"".join(table["board"].to_pylist()), dtype=np.int8)
    boards = flat.reshape(-1, size, size).copy()  # writable, owned by the caller
    moves = table["move"].to_numpy().astype(np.int64)
    return boards, moves, table["ply"].to_numpy().astype(np.int64)
