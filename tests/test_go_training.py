"""Go through the streaming loader and the trainer: compact [4, S, S] batches, D4 augmentation
of all planes with the move (pass stays S*S), resumption, a Go network trained end to end, its
TorchScript export checked against eager, and a resumed Go run reaching the same weights.

Most tests run on a synthetic 9x9 dataset (random legal games, passes included) built with the
project's own Go ingest (`read_source_pairs` -> `go_deduplicate` -> shards), so they need
nothing outside the repository; the last ones use the real KGS dev games from ../shared
(skipped when absent)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from services.dataset import shards
from services.dataset.augment import Augmenter
from services.dataset.loader import (
    ShardStream,
    dataset_game,
    make_loader,
    random_symmetry_torch,
)
from services.dataset.shards import DatasetError, atomic_write_json, read_split
from services.dataset.sources import read_source_pairs
from services.games.go.features import N_GO_PLANES
from services.games.go.game import GO
from services.games.go.rules import GoState, sgf_name
from services.games.symmetry import N_SYMMETRIES, point_table
from services.models.configs import build
from services.models.export import check_inputs, export_torchscript
from services.trainer.metrics import stage_labels
from services.trainer.train import GameMismatchError, TrainConfig, train
from tests.conftest import SHARED_DATA, split_rows
from tests.go_dedup_reference import go_deduplicate

S = 9
PASS = S * S
KGS_TARBALL = SHARED_DATA / "kgs" / "kgs-games-dev.tar.gz"


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One intra-op thread: on the shared 2-core dev machine, two OpenMP threads competing
    with other processes spin-wait and ran these small steps ~10x slower (measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def random_games_sgf(n_games: int, size: int, seed: int, max_moves: int = 70) -> str:
    """`n_games` random legal games in one SGF collection; about one move in 12 is a pass."""
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(n_games):
        state = GoState(size)
        moves = []
        for _ in range(int(rng.integers(max_moves // 2, max_moves))):
            legal = np.flatnonzero(state.legal_mask())
            point = None if rng.random() < 1 / 12 or not len(legal) else int(rng.choice(legal))
            color = "BW"[state.to_move - 1]
            state = state.play(point)
            moves.append(f";{color}[{sgf_name(point, size)}]")
            if state.passes >= 2:
                break
        result = "B+R" if rng.random() < 0.5 else "W+R"
        trees.append(f"(;GM[1]FF[4]SZ[{size}]KM[7.5]RE[{result}]{''.join(moves)})")
    return "\n".join(trees)


def write_go_dataset(sources: list[Path], out: Path, board_size: int,
                     row_group_rows: int | None = None) -> dict:
    """Ingest Go sources with the project's builder into `out`; small row groups on request."""
    table = go_deduplicate([read_source_pairs(GO, p, board_size=board_size).pairs for p in sources])
    with pytest.MonkeyPatch.context() as mp:
        if row_group_rows:
            mp.setattr(shards, "ROW_GROUP_ROWS", row_group_rows)
        files = shards.write_split_shards(table, out)
    manifest = {"schema_version": shards.SCHEMA_VERSION, "game": "go", "rows": table.num_rows,
                "splits": {s: sum(f["rows"] for f in files if f["split"] == s)
                           for s in shards.SPLITS},
                "files": files}
    atomic_write_json(manifest, out / "manifest.json")
    return manifest


@pytest.fixture(scope="module")
def go_dataset(tmp_path_factory) -> Path:
    """~3,000 unique 9x9 pairs from 60 random games, row groups of 200 rows."""
    base = tmp_path_factory.mktemp("go-train")
    sgf = base / "random.sgf"
    sgf.write_text(random_games_sgf(60, S, seed=0))
    out = base / "ds"
    write_go_dataset([sgf], out, S, row_group_rows=200)
    return out


def collect(batches, limit: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(b["boards"].clone(), b["moves"].clone()) for b in itertools.islice(batches, limit)]


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True))


def undo(board: np.ndarray, move: int, k: int, table: np.ndarray) -> tuple[bytes, int]:
    """The row that symmetry k maps onto (board [4, s*s], move): original[c, p] =
    board[c, table[k, p]]; a pass stays a pass."""
    original = board[:, table[k]]
    m = move if move == PASS else int(np.flatnonzero(table[k] == move)[0])
    return original.tobytes(), m


# ---------------------------------------------------------------------------- loader


def test_go_batches_are_compact_planes_with_passes(go_dataset: Path) -> None:
    stream = ShardStream(go_dataset, batch_size=32, drop_last=False, shuffle_buffer=300)
    assert (stream.game, stream.board_size, stream.n_moves) == ("go", S, PASS + 1)
    assert stream.board_shape == (4, S, S) and dataset_game(go_dataset) == ("go", S)
    assert len(stream.plan.unit_rows) >= 8  # several row groups to shuffle and deal out
    moves_seen = []
    for batch in stream:
        boards, moves = batch["boards"], batch["moves"]
        assert boards.dtype == torch.int8 and boards.shape[1:] == (4, S, S)
        assert moves.dtype == torch.int64 and len(moves) == len(boards) <= 32
        assert set(torch.unique(boards[:, 0]).tolist()) <= {0, 1, 2}
        assert int(boards[:, 1].max()) <= 4 and int(boards[:, 2].max()) <= 4
        assert set(torch.unique(boards[:, 3]).tolist()) <= {0, 1}
        moves_seen += moves.tolist()
    stored = [m for _, m in split_rows(go_dataset)]
    assert len(moves_seen) == stream.rows == len(stored)
    assert min(moves_seen) >= 0 and max(moves_seen) == PASS  # passes reach the trainer
    assert moves_seen.count(PASS) == stored.count(PASS) > 0  # and stay passes
    planes = GO.expand_planes(boards)
    assert planes.shape == (len(boards), N_GO_PLANES, S, S) and planes.dtype == torch.float32


def test_go_augmentation_moves_every_plane_with_the_move(go_dataset: Path) -> None:
    originals = Counter(split_rows(go_dataset))
    table = point_table(S)
    recovered: list[tuple[bytes, int]] = []
    symmetries: Counter = Counter()
    for batch in ShardStream(go_dataset, batch_size=64, seed=7, drop_last=False):
        boards = batch["boards"].reshape(len(batch["moves"]), 4, S * S).numpy()
        for board, move in zip(boards, batch["moves"].tolist(), strict=True):
            if move != PASS:
                assert board[0, move] == 0  # the move's point is empty in the moved board
            matches = [k for k in range(N_SYMMETRIES)
                       if undo(board, move, k, table) in originals]
            assert matches, "an augmented row that is no symmetry of any original row"
            recovered.append(undo(board, move, matches[0], table))
            symmetries[matches[0]] += 1
    assert Counter(recovered) == originals  # every stored row exactly once
    assert len(symmetries) == N_SYMMETRIES


def test_augmenter_carries_a_marker_at_the_move_in_every_plane() -> None:
    """A mark on the move's point in each plane lands on the transformed move's point."""
    rng = np.random.default_rng(1)
    n = 400
    boards = np.zeros((n, 4, S * S), dtype=np.int8)
    moves = rng.integers(0, PASS + 1, n)
    moves[:50] = PASS
    for c in range(4):
        on_board = moves < PASS
        boards[np.flatnonzero(on_board), c, moves[on_board]] = c + 1
    out_b = np.empty((n, 4 * S * S), dtype=np.int8)
    out_m = np.empty(n, dtype=np.int64)
    Augmenter(S, channels=4)(boards.reshape(n, -1), moves, rng, out_b, out_m)
    out_b = out_b.reshape(n, 4, S * S)
    assert (out_m == PASS).sum() == (moves == PASS).sum() >= 50  # passes stay passes
    for board, move in zip(out_b, out_m, strict=True):
        if move == PASS:
            assert not board.any()
        else:
            assert [int(board[c, move]) for c in range(4)] == [1, 2, 3, 4]
            assert (board != 0).sum() == 4


def test_device_augmentation_of_go_planes_and_pass(go_dataset: Path) -> None:
    batch = next(iter(ShardStream(go_dataset, batch_size=64, augment=False)))
    moves_in = batch["moves"].clone()
    moves_in[:5] = PASS
    boards, moves = random_symmetry_torch(batch["boards"], moves_in,
                                          torch.Generator().manual_seed(0))
    ks = torch.randint(0, N_SYMMETRIES, (64,), generator=torch.Generator().manual_seed(0))
    table = point_table(S)
    assert boards.shape == (64, 4, S, S) and boards.dtype == torch.int8
    for i, k in enumerate(ks.tolist()):
        expected = np.empty((4, S * S), np.int8)
        expected[:, table[k]] = batch["boards"][i].reshape(4, -1).numpy()
        assert np.array_equal(boards[i].reshape(4, -1).numpy(), expected)
        m = int(moves_in[i])
        assert int(moves[i]) == (PASS if m == PASS else table[k, m])


@pytest.mark.parametrize("num_workers", [
    0, pytest.param(2, marks=pytest.mark.integration)])  # workers: too heavy for the unit tier
def test_go_resume_mid_epoch_yields_the_uninterrupted_tail(go_dataset: Path,
                                                           num_workers: int) -> None:
    kwargs = {"batch_size": 32, "seed": 5, "shuffle_buffer": 250, "drop_last": False,
              "num_workers": num_workers}
    full = collect(make_loader(go_dataset, "train", **kwargs))
    assert len(full) > 30
    head_loader = make_loader(go_dataset, "train", **kwargs)
    head = collect(head_loader, 17)
    state = json.loads(json.dumps(head_loader.state_dict()))
    again = make_loader(go_dataset, "train", **kwargs)
    again.load_state_dict(state)
    assert same(head + collect(again), full)


def test_read_rows_matches_read_split_order(go_dataset: Path) -> None:
    boards, moves, _ = read_split(go_dataset, "train")
    stream = ShardStream(go_dataset)
    ids = np.array([0, 5, 199, 200, len(moves) - 1])
    b, m = stream.read_rows(ids)
    assert np.array_equal(b, boards[ids]) and np.array_equal(m, moves[ids])


def test_manifest_game_must_match_the_shards(go_dataset: Path, tmp_path: Path) -> None:
    import shutil

    ds = Path(shutil.copytree(go_dataset, tmp_path / "ds"))
    manifest = json.loads((ds / "manifest.json").read_text())
    manifest["game"] = "gomoku"
    atomic_write_json(manifest, ds / "manifest.json")
    with pytest.raises(DatasetError, match=r"says game 'gomoku'.*hold 'go' rows"):
        ShardStream(ds)


def packed_copy(plain: Path, out: Path) -> Path:
    """The dataset at `plain` with its boards packed (`pack_planes`), as the ingest flow
    writes Go shards, and the manifest saying so."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from services.games.go.replay import pack_planes

    out.mkdir()
    manifest = json.loads((plain / "manifest.json").read_text())
    for entry in manifest["files"]:
        pf = pq.ParquetFile(plain / entry["path"])
        with pq.ParquetWriter(out / entry["path"], shards.PAIR_SCHEMA) as writer:
            for g in range(pf.metadata.num_row_groups):  # the same row groups
                group = pf.read_row_group(g)
                boards = np.frombuffer(b"".join(group["board"].to_pylist()), np.uint8)
                packed = pack_planes(boards.reshape(group.num_rows, -1), S)
                group = group.set_column(0, "board", pa.array(
                    [row.tobytes() for row in packed], pa.binary()))
                writer.write_table(group.cast(shards.PAIR_SCHEMA))
    manifest["writer"] = {"board_encoding": shards.PACKED_BOARDS}
    atomic_write_json(manifest, out / "manifest.json")
    return out


def test_packed_shards_read_as_the_plain_ones(go_dataset: Path, tmp_path: Path) -> None:
    """Go shards whose boards are packed (the manifest's writer.board_encoding) give the
    loader, `read_rows` and `read_split` the very planes the plain shards give."""
    packed = packed_copy(go_dataset, tmp_path / "packed")
    from services.games.go.replay import packed_width

    assert {len(board) for board, _ in split_rows(packed)} == {packed_width(S)}  # stored packed
    for augment in (False, True):
        kwargs = {"batch_size": 32, "seed": 3, "shuffle_buffer": 300, "augment": augment,
                  "drop_last": False}
        assert same(collect(ShardStream(packed, **kwargs)),
                    collect(ShardStream(go_dataset, **kwargs)))
    ids = np.array([0, 7, 200, 1000])
    for got, want in zip(ShardStream(packed).read_rows(ids, results=True),
                         ShardStream(go_dataset).read_rows(ids, results=True), strict=True):
        np.testing.assert_array_equal(got, want)
    for split in ("train", "validation"):
        for got, want in zip(read_split(packed, split, results=True),
                             read_split(go_dataset, split, results=True), strict=True):
            np.testing.assert_array_equal(got, want)


def test_an_unknown_board_encoding_is_refused_by_name(go_dataset: Path,
                                                      tmp_path: Path) -> None:
    import shutil

    ds = Path(shutil.copytree(go_dataset, tmp_path / "ds"))
    manifest = json.loads((ds / "manifest.json").read_text())
    manifest["writer"] = {"board_encoding": "zigzag"}
    atomic_write_json(manifest, ds / "manifest.json")
    match = r"manifest.json: board encoding 'zigzag' is not one this reader knows"
    with pytest.raises(DatasetError, match=match):
        ShardStream(ds)
    with pytest.raises(DatasetError, match=match):
        read_split(ds, "train")


# ---------------------------------------------------------------------------- trainer


def go_config(**kw) -> TrainConfig:
    base = {"model": "go_res_b2c32", "batch_size": 32, "max_steps": 30, "train_eval_rows": 256,
            "shuffle_buffer": 400, "learning_rate": 0.002}
    return TrainConfig(**{**base, **kw})


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_go_training_reports_every_split_each_epoch_and_exports(go_dataset: Path,
                                                                tmp_path: Path) -> None:
    result = train(go_dataset, go_config(max_steps=200, max_epochs=2), progress=False)
    m = result.metrics
    assert m["game"] == "go" and m["n_moves"] == PASS + 1 and m["stopped"] == "max_epochs"
    assert m["epochs"] == 2 and len(result.history) == 2
    for epoch in result.history:  # per epoch: train, validation AND test
        for split in ("train", "validation", "test"):
            assert {"loss", "top1", "top5", "n"} <= set(epoch[split]), split
            assert 0 <= epoch[split]["top1"] <= epoch[split]["top5"] <= 1
    assert m["test"] == result.history[-1]["test"]  # final figures = last evaluation
    assert set(m["validation"]["top1_by_stage"]) <= set(stage_labels(*GO.stages))
    # random legal games: any legal point is as likely as any other (~1/50), a trained
    # network still learns that the move's point is empty and ply-dependent passes
    assert m["validation"]["loss"] < np.log(PASS + 1)
    boards, _, _ = read_split(go_dataset, "validation")
    diff = export_torchscript(result.model, tmp_path / "go.pt", board_size=S, game="go",
                              boards=boards[:64])
    assert diff <= 1e-4
    scripted = torch.jit.load(str(tmp_path / "go.pt"))
    x = torch.from_numpy(boards[:16])
    with torch.no_grad():
        assert scripted(x).shape == (16, PASS + 1)
        assert torch.allclose(scripted(x), result.model(x), atol=1e-4)


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_go_run_killed_and_resumed_reaches_the_same_weights(go_dataset: Path,
                                                            tmp_path: Path) -> None:
    straight = train(go_dataset, go_config(max_steps=40), progress=False)
    ckpt = tmp_path / "ckpt.pt"
    first = train(go_dataset, go_config(max_steps=15, checkpoint_every=5), progress=False,
                  checkpoint=ckpt)
    assert first.metrics["steps"] == 15
    resumed = train(go_dataset, go_config(max_steps=40), progress=False, checkpoint=ckpt)
    assert resumed.metrics["steps"] == 40
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)


def test_a_model_of_the_other_game_is_refused(go_dataset: Path) -> None:
    with pytest.raises(GameMismatchError, match=r"holds go positions.*shao_f32_n2"):
        train(go_dataset, go_config(model="shao_f32_n2"), progress=False)


def test_export_checks_go_models_on_valid_planes(tmp_path: Path) -> None:
    inputs = check_inputs("go", 19, 32)
    assert inputs.shape == (32, 4, 19, 19) and inputs.dtype == torch.int8
    assert int(inputs[:, 1].max()) == 4 and bool((inputs[:, 2] > 0).any())
    assert bool((inputs[:, 1][inputs[:, 0] == 0] == 0).all())  # liberties only on stones
    model = build("go_res_b2c32")
    diff = export_torchscript(model, tmp_path / "m.pt", board_size=19, game="go")
    assert diff <= 1e-4
    loaded = torch.jit.load(str(tmp_path / "m.pt"))
    with torch.no_grad():
        assert loaded(inputs).shape == (32, 19 * 19 + 1)
    # the stock PyTorch backend binds the input by forward's argument name (deploy/triton-stock)
    assert [a.name for a in loaded.forward.schema.arguments] == ["self", "boards"]


# ---------------------------------------------------------------------------- flows


def test_train_flow_takes_a_go_dataset(go_dataset: Path, tmp_path: Path,
                                       prefect_harness) -> None:
    from flows.train import train_flow

    out = train_flow(dataset_dir=str(go_dataset), repository=str(tmp_path / "repo"),
                     config=TrainConfig(max_steps=8, batch_size=32, num_threads=1),
                     run_dir=str(tmp_path / "run"))
    assert out["game"] == "go" and out["config"]["model"] == "go_res_b2c32_v"  # by the dataset
    # the tracked go_policy config takes every served size (dims [4, -1, -1]): 9x9 too
    assert out["model_name"] == "go_policy" and out["published"] and out["version"] == 1
    assert (tmp_path / "repo" / "go_policy" / "1" / "model.pt").is_file()
    assert {"train", "validation", "test"} <= set(out["metrics"])
    report = (tmp_path / "run" / "report.md").read_text()
    assert "| test |" in report and "| validation |" in report
    assert "| value MSE | value sign right |" in report  # the default has a value head


def test_train_deployment_example_has_its_schedule(tmp_path: Path) -> None:
    from flows.schedules import DEFAULT_TRAIN_CRON, train_deployment

    deployment = train_deployment(str(tmp_path / "go-ds"),
                                  TrainConfig(model="go_res_b2c32", max_seconds=600))
    assert deployment.name == "nightly-train" and deployment.flow_name == "train"
    assert deployment.entrypoint == "flows/train.py:train_flow"
    (schedule,) = deployment.schedules
    assert schedule.schedule.cron == DEFAULT_TRAIN_CRON and schedule.schedule.timezone == "UTC"
    assert deployment.parameters["dataset_dir"] == str(tmp_path / "go-ds")
    assert deployment.parameters["config"]["model"] == "go_res_b2c32"
    assert deployment.parameters["config"]["max_seconds"] == 600


# ---------------------------------------------------------------------------- real KGS games


@pytest.fixture(scope="module")
def kgs_dataset(tmp_path_factory) -> Path:
    if not KGS_TARBALL.is_file():
        pytest.skip(f"KGS games not found at {KGS_TARBALL} (../shared absent)")
    out = tmp_path_factory.mktemp("kgs") / "ds"
    manifest = write_go_dataset([KGS_TARBALL], out, 19, row_group_rows=2048)
    assert manifest["rows"] > 5000
    return out


def test_kgs_games_train_and_resume_as_19x19_go(kgs_dataset: Path, tmp_path: Path) -> None:
    batch = next(iter(ShardStream(kgs_dataset, batch_size=64)))
    assert batch["boards"].shape == (64, 4, 19, 19)
    assert int(batch["moves"].max()) <= 19 * 19
    config = go_config(max_steps=12, batch_size=16, train_eval_rows=128, shuffle_buffer=1024)
    straight = train(kgs_dataset, config, progress=False)
    ckpt = tmp_path / "kgs.pt"
    train(kgs_dataset, go_config(**{**config.__dict__, "max_steps": 5}), progress=False,
          checkpoint=ckpt)
    resumed = train(kgs_dataset, config, progress=False, checkpoint=ckpt)
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)
    m = resumed.metrics
    assert m["n_moves"] == 362 and all(m[s]["n"] > 0 for s in ("validation", "test"))
    boards, _, _ = read_split(kgs_dataset, "test")
    assert export_torchscript(resumed.model, tmp_path / "kgs-model.pt", board_size=19,
                              game="go", boards=boards[:32]) <= 1e-4


def test_servable_configs_follow_the_dims(go_dataset: Path, tmp_path: Path) -> None:
    from services.trainer.publish import unservable_reason

    repo = str(tmp_path / "empty-repo")  # falls back to the tracked templates
    assert unservable_reason(repo, "go_policy", str(go_dataset)) is None  # [4, -1, -1]
    reason = unservable_reason(repo, "gomoku_policy", str(go_dataset))
    assert reason is not None and "[15, 15]" in reason and "[4, 9, 9]" in reason
    assert "no Triton config" in unservable_reason(repo, "nope", str(go_dataset))
