"""Streaming loader: exactly-once sharding, reproducible order, augmentation, resumption, errors."""

from __future__ import annotations

import itertools
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from services.dataset import loader as loader_module
from services.dataset import shards
from services.dataset.build import deduplicate
from services.dataset.loader import (
    ShardStream,
    board_matrix,
    make_loader,
    random_symmetry_torch,
)
from services.dataset.shards import DatasetError, atomic_write_json, write_split_shards
from services.games.gomoku.replay import source_pairs
from services.games.symmetry import N_SYMMETRIES, point_table
from services.records.rif import read_rif
from tests.conftest import SAMPLE_RIF, split_rows

S = 15
GAMES = 150  # of the shipped sample: ~5,000 train rows


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """The sample's pairs as shards with small row groups, so a split has many units."""
    out = tmp_path_factory.mktemp("loader") / "ds"
    result = source_pairs(SAMPLE_RIF.name, itertools.islice(read_rif(SAMPLE_RIF), GAMES))
    table = deduplicate([result.pairs])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shards, "ROW_GROUP_ROWS", 300)
        mp.setattr(shards, "ROWS_PER_SHARD", 1700)
        files = write_split_shards(table, out)
    manifest = {"schema_version": shards.SCHEMA_VERSION, "rows": table.num_rows,
                "splits": {s: sum(f["rows"] for f in files if f["split"] == s)
                           for s in shards.SPLITS},
                "files": files}
    atomic_write_json(manifest, out / "manifest.json")
    return out


def batch_rows(batch: dict) -> list[tuple[bytes, int]]:
    boards = batch["boards"].reshape(len(batch["moves"]), -1).numpy()
    return [(b.tobytes(), int(m)) for b, m in zip(boards, batch["moves"].tolist(), strict=True)]


def collect(batches, limit: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for batch in itertools.islice(batches, limit):
        out.append((batch["boards"].clone(), batch["moves"].clone()))
    return out


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True))


def test_dataset_has_many_row_groups(dataset: Path) -> None:
    stream = ShardStream(dataset)
    assert len(stream.plan.paths) >= 3 and len(stream.plan.unit_rows) >= 12
    assert stream.rows == len(split_rows(dataset))


def test_board_matrix_is_a_view_of_the_arrow_buffer() -> None:
    rng = np.random.default_rng(0)
    boards = rng.integers(0, 3, (20, S * S), dtype=np.int8)
    column = pa.array([b.tobytes() for b in boards], pa.binary()).slice(3, 12)
    view = board_matrix(column, S * S)
    assert view.dtype == np.int8 and view.shape == (12, S * S)
    assert np.array_equal(view, boards[3:15])
    assert not view.flags.owndata  # no copy of the cells
    ragged = pa.array([b"\x00" * (S * S), b"\x00" * (S * S - 1)], pa.binary())
    with pytest.raises(DatasetError, match="225 bytes"):
        board_matrix(ragged, S * S, "x.parquet: row group 0")


def test_batches_are_compact_tensors(dataset: Path) -> None:
    batch = next(iter(ShardStream(dataset, batch_size=32)))
    assert batch["boards"].dtype == torch.int8 and batch["boards"].shape == (32, S, S)
    assert batch["moves"].dtype == torch.int64 and batch["moves"].shape == (32,)


def test_gomoku_stream_knows_its_game_and_reads_rows_by_id(dataset: Path) -> None:
    stream = ShardStream(dataset)
    assert (stream.game, stream.n_moves, stream.board_shape) == ("gomoku", S * S, (S, S))
    rows = split_rows(dataset)
    boards, moves = stream.read_rows(np.array([0, 299, 300, len(rows) - 1]))
    assert boards.shape == (4, S, S)
    for i, row in enumerate([0, 299, 300, len(rows) - 1]):
        assert (boards[i].tobytes(), int(moves[i])) == rows[row]


def test_every_row_once_per_epoch_across_two_workers(dataset: Path) -> None:
    loader = make_loader(dataset, "train", batch_size=64, num_workers=2, seed=1,
                         augment=False, drop_last=False, shuffle_buffer=400)
    seen: list[tuple[bytes, int]] = []
    workers = Counter()
    for batch in loader:
        seen += batch_rows(batch)
        workers[batch["worker"]] += len(batch["moves"])
    assert Counter(seen) == Counter(split_rows(dataset))  # each row exactly once
    assert set(workers) == {0, 1} and min(workers.values()) > 0
    expected = len(loader)  # batches of the next pass (epoch 1)
    assert sum(1 for _ in loader) == expected


def test_two_ranks_with_two_workers_each_partition_the_split(dataset: Path) -> None:
    per_rank = []
    for rank in (0, 1):
        loader = make_loader(dataset, "train", batch_size=50, num_workers=2, seed=2,
                             augment=False, drop_last=False, rank=rank, world_size=2)
        rows = [row for batch in loader for row in batch_rows(batch)]
        assert len(rows) == len(set(rows))
        per_rank.append(set(rows))
    assert per_rank[0].isdisjoint(per_rank[1])
    assert per_rank[0] | per_rank[1] == set(split_rows(dataset))


def test_units_are_dealt_round_robin_over_global_workers(dataset: Path) -> None:
    stream = ShardStream(dataset, seed=5)
    units = [stream.units_of(0, g, 6).tolist() for g in range(6)]
    flat = [u for part in units for u in part]
    assert sorted(flat) == list(range(len(stream.plan.unit_rows)))
    order = np.random.default_rng([5, 0, 0]).permutation(len(stream.plan.unit_rows))
    assert all(units[i % 6][i // 6] == order[i] for i in range(len(order)))


def test_order_is_reproducible_per_seed_and_epoch(dataset: Path) -> None:
    kwargs = {"batch_size": 64, "shuffle_buffer": 500}
    first = collect(ShardStream(dataset, seed=3, epoch=1, **kwargs))
    assert same(first, collect(ShardStream(dataset, seed=3, epoch=1, **kwargs)))
    assert not same(first, collect(ShardStream(dataset, seed=3, epoch=2, **kwargs)))
    assert not same(first, collect(ShardStream(dataset, seed=4, epoch=1, **kwargs)))
    # each pass is the next epoch
    stream = ShardStream(dataset, seed=3, epoch=0, **kwargs)
    collect(stream)
    assert stream.epoch == 1
    assert same(first, collect(stream))


def test_drop_last_gives_only_full_batches(dataset: Path) -> None:
    stream = ShardStream(dataset, batch_size=100, shuffle_buffer=300)
    sizes = [len(b["moves"]) for b in stream]
    assert set(sizes) == {100} and len(sizes) == stream.rows // 100 == stream.num_batches(0, 0)
    loose = ShardStream(dataset, batch_size=100, drop_last=False)
    assert sum(len(b["moves"]) for b in loose) == loose.rows


def test_augmentation_keeps_board_and_move_consistent(dataset: Path) -> None:
    originals = Counter(split_rows(dataset))
    table = point_table(S)
    recovered: list[tuple[bytes, int]] = []
    symmetries = Counter()
    changed = 0
    for batch in ShardStream(dataset, batch_size=128, seed=7, drop_last=False):
        boards = batch["boards"].reshape(len(batch["moves"]), -1).numpy()
        for board, move in zip(boards, batch["moves"].tolist(), strict=True):
            assert board[move] == 0  # the move's cell is empty after the transform
            matches = []
            for k in range(N_SYMMETRIES):  # undo k: original[p] = board[table[k, p]]
                key = (board[table[k]].tobytes(), int(np.flatnonzero(table[k] == move)[0]))
                if key in originals:
                    matches.append((k, key))
            assert matches, "an augmented row that is no symmetry of any original row"
            recovered.append(matches[0][1])
            symmetries[matches[0][0]] += 1
            changed += matches[0][0] != 0
    assert Counter(recovered) == originals  # a bijection: every original row once
    n = sum(symmetries.values())
    assert set(symmetries) == set(range(N_SYMMETRIES))
    assert all(abs(c - n / 8) < 0.25 * n / 8 for k, c in symmetries.items() if k), symmetries
    assert changed > 0.7 * n


def test_device_augmentation_applies_the_point_table(dataset: Path) -> None:
    batch = next(iter(ShardStream(dataset, batch_size=64, augment=False)))
    boards, moves = random_symmetry_torch(batch["boards"], batch["moves"],
                                          torch.Generator().manual_seed(0))
    ks = torch.randint(0, N_SYMMETRIES, (64,), generator=torch.Generator().manual_seed(0))
    table = point_table(S)
    assert boards.dtype == torch.int8 and boards.shape == (64, S, S)
    for i, k in enumerate(ks.tolist()):
        expected = np.empty(S * S, np.int8)
        expected[table[k]] = batch["boards"][i].reshape(-1).numpy()
        assert np.array_equal(boards[i].reshape(-1).numpy(), expected)
        assert moves[i] == table[k, batch["moves"][i]]
        assert boards[i].reshape(-1)[moves[i]] == 0


def test_resume_mid_epoch_yields_the_uninterrupted_tail(dataset: Path) -> None:
    kwargs = {"batch_size": 64, "shuffle_buffer": 700, "seed": 11, "drop_last": False}
    full = collect(ShardStream(dataset, **kwargs))
    next_epoch = collect(ShardStream(dataset, epoch=1, **kwargs))
    assert len(full) > 20
    for k in (0, 1, 9, len(full) // 2, len(full) - 2, len(full)):
        head_stream = ShardStream(dataset, **kwargs)
        head = collect(head_stream, k)
        state = json.loads(json.dumps(head_stream.state_dict()))  # survives a checkpoint
        assert state["epoch"] == 0 and state["batches"] == [k]
        resumed = ShardStream(dataset, **kwargs)
        resumed.load_state_dict(state)
        assert same(head + collect(resumed), full), k
        assert same(collect(resumed), next_epoch)  # and the epochs after it are unchanged


def test_resume_through_make_loader_without_workers(dataset: Path) -> None:
    kwargs = {"batch_size": 32, "seed": 4, "shuffle_buffer": 400}
    full = collect(make_loader(dataset, "train", num_workers=0, **kwargs))
    loader = make_loader(dataset, "train", num_workers=0, **kwargs)
    head = collect(loader, 25)
    state = loader.state_dict()
    again = make_loader(dataset, "train", num_workers=0, **kwargs)
    again.load_state_dict(state)
    assert same(head + collect(again), full)
    # a finished epoch saves as the start of the next one
    assert again.state_dict()["epoch"] == 1 and not any(again.state_dict()["batches"])


@pytest.mark.parametrize("k", [7, 30])
def test_resume_with_two_workers_yields_the_uninterrupted_tail(
        dataset: Path, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader_module, "PACKET_ROWS", 3 * 32)  # several packets per block
    kwargs = {"batch_size": 32, "seed": 9, "shuffle_buffer": 300, "num_workers": 2,
              "drop_last": False}
    full = collect(make_loader(dataset, "train", **kwargs))
    loader = make_loader(dataset, "train", **kwargs)
    head = collect(loader, k)
    state = loader.state_dict()
    assert sum(state["batches"]) == k
    again = make_loader(dataset, "train", **kwargs)
    again.load_state_dict(state)
    assert same(head + collect(again), full)


def test_state_must_match_the_loader(dataset: Path) -> None:
    stream = ShardStream(dataset, batch_size=64)
    collect(stream, 3)
    state = stream.state_dict()
    with pytest.raises(ValueError, match="batch_size"):
        ShardStream(dataset, batch_size=32).load_state_dict(state)
    with pytest.raises(ValueError, match="num_workers"):
        make_loader(dataset, batch_size=64, num_workers=2).load_state_dict(state)
    loader = make_loader(dataset, batch_size=64, num_workers=1)
    next(iter(loader))
    with pytest.raises(RuntimeError, match="before the first pass"):
        loader.load_state_dict(loader.state_dict())


# ---------------------------------------------------------------------------- errors


@pytest.fixture
def broken(dataset: Path, tmp_path: Path) -> Path:
    """A private copy of the dataset to damage."""
    return Path(shutil.copytree(dataset, tmp_path / "ds"))


def train_shard(ds: Path, i: int = 1) -> Path:
    return sorted(ds.glob("train-*.parquet"))[i]


def test_missing_shard_names_the_file(broken: Path) -> None:
    path = train_shard(broken)
    path.unlink()
    with pytest.raises(DatasetError, match=rf"{path.name}: shard listed in the manifest"):
        ShardStream(broken)


def test_wrong_schema_version_names_the_file(broken: Path) -> None:
    path = train_shard(broken)
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({shards.SCHEMA_KEY: b"0"}), path)
    v = shards.SCHEMA_VERSION
    with pytest.raises(DatasetError, match=rf"{path.name}: schema version b'0', expected {v}"):
        ShardStream(broken)


def test_empty_split_names_the_manifest(broken: Path) -> None:
    manifest = json.loads((broken / "manifest.json").read_text())
    empty = broken / "validation-00000.parquet"
    pq.write_table(shards.PAIR_SCHEMA.empty_table(), empty)
    manifest["files"] = [f for f in manifest["files"] if f["split"] != "validation"]
    manifest["files"].append({"path": empty.name, "split": "validation", "rows": 0})
    atomic_write_json(manifest, broken / "manifest.json")
    with pytest.raises(DatasetError, match=r"manifest.json: split 'validation' is empty"):
        ShardStream(broken, split="validation")
    with pytest.raises(DatasetError, match=r"manifest.json: split 'nonesuch' has no shards"):
        ShardStream(broken, split="nonesuch")


def test_unreadable_file_names_the_file(broken: Path) -> None:
    path = train_shard(broken)
    path.write_bytes(b"not parquet at all" * 100)
    with pytest.raises(DatasetError, match=rf"{path.name}: not a readable Parquet file"):
        ShardStream(broken)


def test_row_count_differing_from_the_manifest_names_the_file(broken: Path) -> None:
    path = train_shard(broken)
    table = pq.read_table(path)
    pq.write_table(table.slice(0, 10), path)
    with pytest.raises(DatasetError, match=rf"{path.name}: 10 rows, the manifest says"):
        ShardStream(broken)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_corrupt_pages_name_the_file_and_row_group(broken: Path, num_workers: int) -> None:
    path = train_shard(broken)
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(2).column(0)  # board column of row group 2: its data pages
    start = column.data_page_offset
    end = (column.dictionary_page_offset or start) + column.total_compressed_size
    data = bytearray(path.read_bytes())
    data[start:end] = np.random.default_rng(0).integers(0, 256, end - start, np.uint8).tobytes()
    path.write_bytes(bytes(data))
    loader = make_loader(broken, "train", batch_size=64, num_workers=num_workers)
    with pytest.raises(DatasetError, match=rf"{path.name}: row group 2: cannot be read"):
        for _ in loader:
            pass
    loader.close()  # the workers end here, not in whichever test the collector runs in


def split_results(dataset_dir: Path, split: str = "train") -> dict[tuple[bytes, int], float]:
    manifest = json.loads((dataset_dir / "manifest.json").read_text())
    out = {}
    for entry in manifest["files"]:
        if entry["split"] == split:
            t = pq.read_table(dataset_dir / entry["path"], columns=["board", "move", "result"])
            out.update(zip(zip(t["board"].to_pylist(), t["move"].to_pylist(), strict=True),
                           t["result"].to_pylist(), strict=True))
    return out


def test_results_travel_with_their_rows_through_augmentation(dataset: Path) -> None:
    results = split_results(dataset)
    known = [r for r in results.values() if r == r]
    assert len(known) > 0.9 * len(results) and {0.0, 1.0} <= set(known)  # the sample's games
    table = point_table(S)
    inverse = np.argsort(table, axis=1)  # inverse[k][move]: the point table[k] maps to move
    seen = 0
    for batch in ShardStream(dataset, batch_size=128, seed=3, drop_last=False, results=True):
        assert batch["results"].dtype == torch.float32
        assert len(batch["results"]) == len(batch["moves"])
        boards = batch["boards"].reshape(len(batch["moves"]), -1).numpy()
        moves = batch["moves"].numpy()
        images = boards[:, table]  # [rows, symmetry, point]: every image of every row
        image_moves = inverse[:, moves].T.tolist()  # [rows, symmetry]
        for image, image_move, result in zip(images, image_moves, batch["results"].tolist(),
                                             strict=True):
            for k in range(N_SYMMETRIES):
                key = (image[k].tobytes(), image_move[k])
                if key in results:
                    expected = results[key]
                    assert result == expected or (result != result and expected != expected)
                    break
            else:
                raise AssertionError("a row that is no symmetry of any original row")
            seen += 1
    assert seen == len(results)


def test_results_do_not_change_the_order_and_resume_with_workers(
        dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader_module, "PACKET_ROWS", 3 * 32)
    kwargs = {"batch_size": 32, "seed": 9, "shuffle_buffer": 300, "num_workers": 2,
              "drop_last": False}

    def rows(loader, limit=None) -> list[tuple[torch.Tensor, ...]]:
        return [(b["boards"].clone(), b["moves"].clone(), b["results"].clone())
                for b in itertools.islice(loader, limit)]

    plain = collect(make_loader(dataset, "train", **kwargs))
    full = rows(make_loader(dataset, "train", results=True, **kwargs))
    assert same([f[:2] for f in full], plain)  # the same rows in the same order
    loader = make_loader(dataset, "train", results=True, **kwargs)
    head = rows(loader, 11)
    again = make_loader(dataset, "train", results=True, **kwargs)
    again.load_state_dict(loader.state_dict())
    resumed = head + rows(again)
    assert len(resumed) == len(full)
    for a, b in zip(resumed, full, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert torch.equal(a[2].nan_to_num(-9), b[2].nan_to_num(-9))


def test_read_rows_returns_results_on_request(dataset: Path) -> None:
    stream = ShardStream(dataset)
    results = split_results(dataset)
    ids = np.array([0, 5, 17, stream.rows - 1])
    boards, moves, got = stream.read_rows(ids, results=True)
    for board, move, result in zip(boards, moves.tolist(), got.tolist(), strict=True):
        expected = results[(board.reshape(-1).tobytes(), move)]
        assert result == expected or (result != result and expected != expected)
    assert len(stream.read_rows(ids)) == 2
