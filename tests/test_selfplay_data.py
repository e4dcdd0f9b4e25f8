"""Self-play games -> shards through the ingest path -> the loader's soft targets -> a step.

Games are played with the deterministic `HashedEvaluator` and tiny searches, so every figure
here follows from the seeds. Each row is checked against what its game file says, and its
policy target against a brute-force image of the raw target (the board-shaped visit counts
turned by `transform_board`, not by the point tables the ingest uses).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from services.dataset import shards
from services.dataset.augment import Augmenter
from services.dataset.dedup import BuildSettings, build_shards
from services.dataset.loader import ShardStream
from services.games.registry import get_game
from services.games.symmetry import N_SYMMETRIES, transform_board
from services.selfplay import records
from services.selfplay.openings import opening_suite
from services.selfplay.pairs import selfplay_pairs, write_selfplay_pairs
from services.selfplay.worker import run_worker
from services.trainer.train import TrainConfig, make_model, make_step, policy_loss, train
from tests.test_selfplay import FAST, HashedEvaluator
from tests.tictactoe_game import TICTACTOE

torch.set_num_threads(1)

# (game, board size kept, evaluator's extra policy entries: Go's pass); every registered game,
# the test game of tests/tictactoe_game.py (imported above: it registers itself) included
GAMES = {"gomoku": (None, 0), "go": (9, 1), "capture": (5, 0), TICTACTOE.name: (None, 0)}
# the games whose self-play here reaches FAST's move cap (a draw); the Capture Game ends by the
# rules within its 25 points and never in a draw, tic-tac-toe within 9 moves
MOVE_CAP_DRAWS = {"gomoku", "go"}


def _play(folder: Path, name: str, games: int = 4) -> Path:
    """`games` games played to the move cap (draws), and two that Black resigns (a result)."""
    game = get_game(name)
    size, extra = GAMES[name]
    openings = opening_suite(game, 2, seed=0, size=size) if name == "gomoku" else [()]
    for worker, value, count in (("w0", 0.2, games), ("w1", -0.95, 2)):
        run_worker(game, HashedEvaluator(black_value=value, points_extra=extra), folder,
                   games=count, settings=FAST, concurrency=2, size=size, openings=openings,
                   worker=worker)
    return folder


@pytest.fixture(scope="module", params=sorted(GAMES))
def played(request, tmp_path_factory) -> tuple[str, Path]:
    name = request.param
    return name, _play(tmp_path_factory.mktemp(f"selfplay-{name}"), name)


def _build(game: str, folder: Path, out: Path, name: str | None = None) -> dict:
    """The folder's intermediate and shards (the ingest flow's read and build, no Prefect)."""
    size = GAMES[game][0]
    pairs = out.with_name(out.name + ".pairs.parquet")
    write_selfplay_pairs(get_game(game), folder, pairs, name, board_size=size)
    built = build_shards([pairs], out, game, BuildSettings(temp_dir=out.parent, threads=1))
    table = pa.concat_tables([pq.read_table(out / f["path"]) for f in built.files])
    return {"table": table, "encoding": built.board_encoding, "rows": built.rows}


def _brute_image(raw: np.ndarray, move: int, size: int, canonical: np.ndarray,
                 canonical_move: int) -> int:
    """The smallest symmetry that takes the raw input and move to the canonical ones, each
    image built by `transform_board` on a board of the move (a pass is no point: it stays)."""
    points = size * size
    for k in range(N_SYMMETRIES):
        if not np.array_equal(transform_board(raw, k).reshape(-1), canonical.reshape(-1)):
            continue
        if move >= points:
            if canonical_move == move:
                return k
            continue
        marks = np.zeros(points, np.int8)
        marks[move] = 1
        if int(np.flatnonzero(transform_board(marks.reshape(size, size), k))[0]) == \
                canonical_move:
            return k
    raise AssertionError("no symmetry image")


def _brute_target(target: list[tuple[int, int]], k: int, size: int, entries: int) -> list[int]:
    points = size * size
    dense = np.zeros(entries, np.int64)
    for move, visits in target:
        dense[move] += visits
    image = transform_board(dense[:points].reshape(size, size), k).reshape(-1)
    return [*image.tolist(), *dense[points:].tolist()]


def test_rows_targets_and_lineage_follow_the_game_files(played, tmp_path):
    name, folder = played
    game = get_game(name)
    built = _build(name, folder, tmp_path / "data")
    table = built["table"]
    files = {p.stem: json.loads(p.read_text()) for p in (folder / "games").glob("*.json")}
    assert table.num_rows == sum(len(d["moves"]) for d in files.values())  # a row a search
    assert set(table["count"].to_pylist()) == {1}
    rows = table.to_pylist()
    size = rows[0]["board_size"]
    entries = game.policy_size(size)
    stored = np.frombuffer(b"".join(r["board"] for r in rows), np.uint8).reshape(len(rows), -1)
    boards = shards.decoded_boards(stored, built["encoding"], size).view(np.int8).reshape(
        len(rows), *game.input_shape(size))
    full_rows = 0
    for row, board in zip(rows, boards, strict=True):
        data = files[row["game_id"]]
        record = records.from_json(data)
        index = row["ply"] - len(record.opening)
        move = record.moves[index]
        assert (row["full"], row["visits"], row["seed"], row["opening"]) == \
            (move.full, move.visits, record.seed, list(record.opening))
        assert (row["model_name"], row["model_version"]) == \
            (record.model_name, record.model_version)
        state = game.start(size)
        for m in record.all_moves[:row["ply"]]:
            state = state.play(m)
        winner = record.winner
        assert row["result"] == (0.5 if winner == 0 else float(state.to_move == winner))
        k = _brute_image(np.asarray(game.network_input(state)), move.move, size, board,
                         row["move"])
        if not move.full:
            assert row["policy_target"] is None
            continue
        full_rows += 1
        assert len(row["policy_target"]) == entries
        assert sum(row["policy_target"]) == sum(v for _, v in move.target) == move.visits
        assert row["policy_target"] == _brute_target(list(move.target), k, size, entries)
        assert row["policy_target"][row["move"]] > 0  # the move played was searched
    assert 0 < full_rows < len(rows)
    results = {r["result"] for r in rows}
    assert {0.0, 1.0} <= results <= {0.0, 0.5, 1.0}  # won and lost games (resignations)
    if name in MOVE_CAP_DRAWS:
        assert 0.5 in results  # games drawn at the move cap
    if name == "capture":
        assert 0.5 not in results  # the first capture (or a suicide) decides every game


def test_the_test_game_writes_the_records_its_own_codec_reads(tmp_path):
    """Tic-tac-toe's package brings its record codec: `write_record` (the longest of its
    suffixes, `.ttt.sgf`) and `replay_source`, which quarantines what its rules refuse."""
    from services.games.base import SourceResult
    from tests.tictactoe_game import RECORD_SUFFIX

    path = TICTACTOE.write_record(tmp_path / f"g{RECORD_SUFFIX}", [0, 3, 1, 4, 2], 3,
                                  comments=["corner"], summary="a test")
    text = path.read_text()
    assert "GM[40]" in text and "RE[B+]" in text and "C[corner]" in text
    path.write_text(text + "(;GM[40]SZ[3];B[bb];W[])(;GM[40]SZ[3];B[bb];B[aa])"
                    "(;GM[40]SZ[3];B[bb];W[bb])")
    result = SourceResult(source=path.name)
    table = pa.concat_tables(list(TICTACTOE.replay_source(path, result)))
    assert (result.read, result.ingested, result.quarantined) == (4, 1, 3)
    assert [q["reason"] for q in result.quarantine] == [
        "illegal move: move 2 is a pass", "illegal move: move 2 is not O's",
        "illegal move: occupied"]
    assert table["ply"].to_pylist() == list(range(5))
    # X (black) made a line on the first row: its moves won (1), O's lost (0)
    assert table["result"].to_pylist() == [1.0, 0.0, 1.0, 0.0, 1.0]


def test_selfplay_rows_are_never_merged(tmp_path):
    folder = _play(tmp_path / "sp", "gomoku", games=2)
    one = _build("gomoku", folder, tmp_path / "one")["table"]
    first = sorted((folder / "games").glob("*.json"))[0]
    data = json.loads(first.read_text())
    data["game_id"] = "w9-000000"  # the same game again under another id
    (folder / "games" / "w9-000000.json").write_text(json.dumps(data))
    two = _build("gomoku", folder, tmp_path / "two")["table"]
    assert two.num_rows == one.num_rows + len(data["moves"])
    assert set(two["count"].to_pylist()) == {1}
    keys = list(zip(two["board"].to_pylist(), two["move"].to_pylist(), strict=True))
    assert len(set(keys)) < len(keys)  # equal pairs, each its own row


def test_a_game_the_rules_refuse_is_quarantined_alone(tmp_path):
    folder = _play(tmp_path / "sp", "gomoku", games=3)
    files = sorted((folder / "games").glob("*.json"))
    data = json.loads(files[0].read_text())
    data["moves"][3]["move"] = data["moves"][2]["move"]  # a point already taken
    files[0].write_text(json.dumps(data))
    files[1].write_text("{not json")
    result = selfplay_pairs(get_game("gomoku"), folder)
    assert (result.read, result.ingested, result.quarantined) == (5, 3, 2)
    reasons = {q["record_id"]: q["reason"] for q in result.quarantine}
    assert reasons[files[0].stem].startswith("illegal move")
    assert reasons[files[1].stem].startswith("unreadable game file")
    assert result.rows == sum(len(json.loads(p.read_text())["moves"]) for p in files[2:])


def test_the_augmenter_moves_policy_targets_with_their_moves():
    rng = np.random.default_rng(0)
    for size, entries, channels in ((15, 225, 1), (9, 82, 4)):
        n = 64
        moves = rng.integers(0, entries, n)
        boards = rng.integers(0, 3, (n, channels * size * size)).astype(np.int8)
        targets = np.zeros((n, entries), np.float32)
        targets[np.arange(n), moves] = 1.0
        out_b, out_m = np.empty_like(boards), np.empty_like(moves)
        out_t = np.empty_like(targets)
        plain_b, plain_m = np.empty_like(boards), np.empty_like(moves)
        Augmenter(size, channels)(boards, moves, np.random.default_rng(1), out_b, out_m,
                                  targets, out_t)
        Augmenter(size, channels)(boards, moves, np.random.default_rng(1), plain_b, plain_m)
        assert np.array_equal(out_b, plain_b) and np.array_equal(out_m, plain_m)
        assert np.array_equal(out_t.argmax(axis=1), out_m) and (out_t.sum(axis=1) == 1).all()


def test_the_loader_delivers_each_rows_target_distribution(played, tmp_path):
    name, folder = played
    out = tmp_path / "data"
    built = _build(name, folder, out)
    manifest = {"schema_version": shards.SCHEMA_VERSION, "game": name,
                "files": [], "writer": {"board_encoding": built["encoding"]}}
    manifest["files"] = [{"path": p.name, "split": p.name.split("-")[0],
                          "rows": pq.ParquetFile(p).metadata.num_rows}
                         for p in sorted(out.glob("*.parquet"))]
    (out / shards.MANIFEST).write_text(json.dumps(manifest))
    stream = ShardStream(out, "train", batch_size=8, shuffle_buffer=16, drop_last=False,
                         results=True)
    assert stream.targets and stream.columns == ("boards", "moves", "results", "targets")
    sums, played_mass = [], []
    for batch in stream:
        t = batch["targets"].numpy()
        assert t.shape == (len(batch["moves"]), stream.n_moves)
        sums += t.sum(axis=1).tolist()
        played_mass += t[np.arange(len(t)), batch["moves"].numpy()].tolist()
    train = built["table"].filter(pa.compute.equal(built["table"]["split"], "train"))
    full = sum(train["full"].to_pylist())
    assert len(sums) == train.num_rows
    assert sum(1 for s in sums if s == pytest.approx(1.0)) == full
    assert sum(1 for s in sums if s == 0.0) == train.num_rows - full
    # the played move (moved with its board) holds visits on every full row
    assert sum(1 for m, s in zip(played_mass, sums, strict=True) if s and m > 0) == full


def test_soft_target_loss_is_the_hand_computed_cross_entropy():
    logits = torch.tensor([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0], [0.3, 0.2, 0.1]])
    moves = torch.tensor([1, 2, 0])
    targets = torch.tensor([[0.25, 0.75, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])

    def log_softmax(row: list[float], i: int) -> float:
        return row[i] - math.log(sum(math.exp(x) for x in row))

    rows = logits.tolist()
    by_hand = (-(0.25 * log_softmax(rows[0], 0) + 0.75 * log_softmax(rows[0], 1))
               - log_softmax(rows[2], 0)) / 2  # the all-zero row (a fast search) adds nothing
    assert policy_loss(logits, moves, targets).item() == pytest.approx(by_hand, rel=1e-6)
    one_hot = torch.nn.functional.one_hot(moves, 3).float()
    assert policy_loss(logits, moves, one_hot).item() == pytest.approx(
        policy_loss(logits, moves).item(), rel=1e-6)
    assert policy_loss(logits, moves, torch.zeros(3, 3)).item() == 0.0


def test_a_training_step_on_selfplay_rows_is_the_soft_cross_entropy(tmp_path):
    folder = _play(tmp_path / "sp", "gomoku", games=2)
    out = tmp_path / "data"
    built = _build("gomoku", folder, out)
    manifest = {"schema_version": shards.SCHEMA_VERSION, "game": "gomoku",
                "files": [{"path": p.name, "split": p.name.split("-")[0]}
                          for p in sorted(out.glob("*.parquet"))],
                "writer": {"board_encoding": built["encoding"]}}
    (out / shards.MANIFEST).write_text(json.dumps(manifest))
    batch = next(iter(ShardStream(out, "train", batch_size=24, shuffle_buffer=0,
                                  results=True)))
    config = TrainConfig(model="shao_f32_n2_v", learning_rate=0.01, value_weight=0.0)
    torch.manual_seed(0)
    model, optimizer, scheduler = make_model(config)
    with torch.no_grad():
        logits, _ = model(batch["boards"])
    logp = torch.log_softmax(logits.double(), dim=1).numpy()
    t = batch["targets"].double().numpy()
    rows = [i for i in range(len(t)) if t[i].sum() > 0]
    assert 0 < len(rows) < len(t)  # full searches' rows and fast ones
    by_hand = -sum(float((t[i] * logp[i]).sum()) for i in rows) / len(rows)
    before = [p.detach().clone() for p in model.parameters()]
    loss = make_step(model, optimizer, scheduler, config)(
        batch["boards"], batch["moves"], batch["results"], batch["targets"])
    assert loss.item() == pytest.approx(by_hand, rel=1e-4)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.usefixtures("prefect_harness")
def test_ingest_flow_quarantines_a_corrupt_game_and_reruns_to_the_same_manifest(tmp_path):
    from flows.ingest import ingest

    folder = _play(tmp_path / "sp", "gomoku", games=6)
    bad = sorted((folder / "games").glob("*.json"))[2]
    lost = len(json.loads(bad.read_text())["moves"])
    bad.write_text(bad.read_text()[:40])
    out = tmp_path / "dataset"
    manifest = ingest(sources=[str(folder)], out_dir=str(out), progress=False)
    counts = manifest["counts"][0]
    assert (counts["read"], counts["ingested"], counts["quarantined"]) == (8, 7, 1)
    assert counts["reasons"] == {"unreadable game file": 1}
    total = sum(len(json.loads(p.read_text())["moves"])
                for p in (folder / "games").glob("*.json") if p != bad)
    assert manifest["rows"] == manifest["raw_pairs"] == total and lost
    assert manifest["files"] and all(
        shards.has_policy_targets(pq.read_schema(out / f["path"])) for f in manifest["files"])
    first = (out / shards.MANIFEST).read_bytes()
    assert ingest(sources=[str(folder)], out_dir=str(out), progress=False) == manifest
    assert (out / shards.MANIFEST).read_bytes() == first
    result = train(out, TrainConfig(model="shao_f32_n2_v", max_steps=1, batch_size=8,
                                    train_eval_rows=16, eval_batch=64, shuffle_buffer=64))
    assert result.metrics["steps"] == 1 and math.isfinite(result.metrics["validation"]["loss"])


@pytest.mark.usefixtures("prefect_harness")
def test_same_named_selfplay_folders_of_two_runs_go_in_one_dataset_by_label(tmp_path):
    """Every run's first self-play folder has one name: as paths they are refused (the name
    labels the rows), as NAME=PATH they are two sources and every game of both is a row."""
    from flows.ingest import ingest, parse_source

    first = _play(tmp_path / "run-a" / "selfplay-0000", "gomoku", games=3)
    second = _play(tmp_path / "run-b" / "selfplay-0000", "gomoku", games=5)
    with pytest.raises(ValueError, match="NAME=PATH"):
        ingest(sources=[str(first), str(second)], out_dir=str(tmp_path / "refused"),
               progress=False)
    manifest = ingest(sources=[f"a={first}", f"b={second}"], out_dir=str(tmp_path / "both"),
                      progress=False)
    moves = {folder: sum(len(json.loads(p.read_text())["moves"])
                         for p in (folder / "games").glob("*.json"))
             for folder in (first, second)}
    assert [c["source"] for c in manifest["counts"]] == ["a", "b"]
    assert [c["read"] for c in manifest["counts"]] == [5, 7]
    assert manifest["rows"] == manifest["raw_pairs"] == sum(moves.values())
    assert [s["path"] for s in manifest["sources"]] == ["a", "b"]
    # a path that exists is a path even with "=" in it; a label is a plain name
    odd = tmp_path / "x=y"
    odd.mkdir()
    assert parse_source(str(odd)) == (odd.name, odd.resolve())
    assert parse_source(f"../up={first}").name == Path(f"../up={first}").resolve().name
