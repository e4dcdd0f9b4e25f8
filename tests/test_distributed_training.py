"""Data-parallel training: 2 CPU processes (gloo) against 1, on the shipped sample.

One spawn of 2 ranks (one torch thread each) runs every 2-rank scenario in turn; its rank 0
saves what the parent compares. The sample's train split is a single row group, so the loader
cuts it into parts for 2 ranks (each rank still gets rows).

Tolerance of "the same metrics within noise": the 2-rank run has the 1-rank run's global batch
(64 = 2 x 32), seed, learning rate and steps, so it differs from it only in which rows fill each
batch, as a run of another seed does. Measured at 100 steps on this data (seeds 0-3): validation
top-1 of 1-rank runs 0.091-0.123, of 2-rank runs 0.068-0.131, the same-seed 1-rank/2-rank
difference within 0.023; loss 3.61-3.78 against 3.60-3.82, difference within 0.08. The bounds,
0.05 top-1 and 0.25 loss, are about 3x the spread of that difference. That DDP averages the
gradients exactly (a 2-rank step on two halves of a batch is the 1-rank step on the whole batch)
is checked apart, to float rounding.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from services.dataset.build import deduplicate
from services.dataset.loader import ShardStream
from services.dataset.shards import (
    SCHEMA_VERSION,
    SPLITS,
    atomic_write_json,
    read_split,
    write_split_shards,
)
from services.games.gomoku.replay import source_pairs
from services.records.rif import RifGame, read_rif
from services.trainer import distributed
from services.trainer.metrics import evaluate
from services.trainer.train import TrainConfig, make_model, make_step, train
from tests.conftest import SAMPLE_RIF

ROOT = Path(__file__).resolve().parents[1]
WORLD = 2
STEPS = 100
KILLED_AT = 40
# a dataset of a few games: an epoch of a 2-rank run is ~20 steps, so 60 cross several
FEW_GAMES = 40
EPOCHS_STEPS = 60
EPOCHS_KILLED_AT = 31
TOP1_TOLERANCE = 0.05
LOSS_TOLERANCE = 0.25


def small(**kw) -> TrainConfig:
    base = {"model": "shao_f32_n2", "batch_size": 64, "max_steps": STEPS,
            "train_eval_rows": 256}
    return TrainConfig(**{**base, **kw})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_dataset(out: Path, records: list) -> Path:
    files = write_split_shards(deduplicate([source_pairs("sample", records).pairs]), out)
    atomic_write_json({"schema_version": SCHEMA_VERSION, "files": files,
                       "splits": {s: sum(f["rows"] for f in files if f["split"] == s)
                                  for s in SPLITS}}, out / "manifest.json")
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("ds"), read_rif(SAMPLE_RIF))


@pytest.fixture(scope="module")
def few_games(tmp_path_factory) -> Path:
    games = [g for g in read_rif(SAMPLE_RIF) if isinstance(g, RifGame)][:FEW_GAMES]
    return write_dataset(tmp_path_factory.mktemp("few"), games)


def fixed_batch(dataset: Path) -> tuple[torch.Tensor, torch.Tensor]:
    boards, moves, _ = read_split(dataset, "validation")
    return torch.from_numpy(boards[:64].copy()), torch.from_numpy(moves[:64].astype(np.int64))


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The gradients the last step applied (clipped), by parameter name."""
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def _ranks(rank: int, world: int, port: int, dataset: Path, few_games: Path,
           out: Path) -> None:
    """Every 2-rank scenario, in one process group (spawned: module-level)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        saved: dict = {}
        # one DDP step on this rank's half of a fixed batch
        config = small()
        torch.manual_seed(0)
        model, optimizer, scheduler = make_model(config)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        boards, moves = fixed_batch(dataset)
        half = slice(rank * 32, (rank + 1) * 32)
        make_step(ddp, optimizer, scheduler, config)(boards[half], moves[half], None)
        saved["one_step"] = {"weights": model.state_dict(), "grads": gradients(model)}

        straight = train(dataset, small(), progress=False)
        saved["straight"] = {"metrics": straight.metrics,
                             "weights": straight.model.state_dict()}
        killed = out / "two-ranks.pt"
        train(dataset, small(max_steps=KILLED_AT), progress=False, checkpoint=killed)
        if rank == 0:
            shutil.copy(killed, out / "two-ranks-at-kill.pt")
        dist.barrier()
        resumed = train(dataset, small(), progress=False, checkpoint=killed)
        saved["resumed"] = {"metrics": resumed.metrics, "weights": resumed.model.state_dict()}
        from_one = train(dataset, small(), progress=False, checkpoint=out / "one-rank.pt")
        saved["from_one_rank"] = {"metrics": from_one.metrics}

        # several epochs: each ends at the batches every rank has, the next starts afresh
        epochs = small(max_steps=EPOCHS_STEPS)
        straight = train(few_games, epochs, progress=False)
        saved["epochs"] = {"metrics": straight.metrics, "history": straight.history,
                           "weights": straight.model.state_dict()}
        killed = out / "epochs.pt"
        train(few_games, small(max_steps=EPOCHS_KILLED_AT), progress=False, checkpoint=killed)
        resumed = train(few_games, epochs, progress=False, checkpoint=killed)
        saved["epochs_resumed"] = {"weights": resumed.model.state_dict()}
        fed = train(few_games, small(max_steps=EPOCHS_STEPS, loader_workers=1), progress=False)
        saved["epochs_worker_fed"] = {"weights": fed.model.state_dict()}
        torch.save(saved, out / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs(dataset: Path, few_games: Path, tmp_path_factory) -> dict:
    """The 1-rank reference runs (in this process) and the 2-rank scenarios (spawned)."""
    out = tmp_path_factory.mktemp("ddp")
    torch.set_num_threads(1)
    one = train(dataset, small(), progress=False)
    train(dataset, small(max_steps=KILLED_AT), progress=False, checkpoint=out / "one-rank.pt")
    mp.spawn(_ranks, args=(WORLD, free_port(), dataset, few_games, out), nprocs=WORLD)
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]
    return {"one": one, "ranks": ranks, "out": out}


def assert_same_weights(a: dict, b: dict, exact: bool = True) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if exact:
            assert torch.equal(a[key], b[key]), key
        else:
            torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6, msg=key)


def test_a_step_on_two_ranks_is_the_step_on_their_whole_batch(dataset: Path, runs: dict) -> None:
    """DDP averages the gradients of the two halves: the gradient of the whole batch's mean
    loss, clipped alike. (Weights after Adam are not compared to float rounding: the policy
    head's bias has a zero gradient up to rounding, which Adam scales up to a full step.)"""
    config = small()
    torch.manual_seed(0)
    model, optimizer, scheduler = make_model(config)
    make_step(model, optimizer, scheduler, config)(*fixed_batch(dataset), None)
    two = [runs["ranks"][r]["one_step"] for r in range(WORLD)]
    assert_same_weights(two[0]["weights"], two[1]["weights"])  # the ranks agree exactly
    whole = gradients(model)
    assert any(bool(g.abs().max() > 1e-3) for g in whole.values())  # a real gradient
    assert_same_weights(whole, two[0]["grads"], exact=False)


def test_two_ranks_match_one_rank_within_noise(runs: dict) -> None:
    one = runs["one"].metrics
    two = runs["ranks"][0]["straight"]["metrics"]
    assert two["world_size"] == WORLD and two["steps"] == one["steps"] == STEPS
    for split in ("validation", "test"):
        assert two[split]["n"] == one[split]["n"]  # the whole split, not a rank's share
        assert abs(two[split]["top1"] - one[split]["top1"]) <= TOP1_TOLERANCE, (split, one, two)
        assert abs(two[split]["loss"] - one[split]["loss"]) <= LOSS_TOLERANCE, (split, one, two)
    assert two["validation"]["top1"] > 0.05  # both learned (uniform guessing: ~0.005)
    # every rank ends with the same weights and the same (reduced) metrics
    assert_same_weights(runs["ranks"][0]["straight"]["weights"],
                        runs["ranks"][1]["straight"]["weights"])
    assert runs["ranks"][1]["straight"]["metrics"]["validation"] == two["validation"]


def test_reduced_metrics_are_those_of_the_whole_split(dataset: Path, runs: dict) -> None:
    """The 2-rank metrics (a share per rank, counts summed) equal one process evaluating the
    final weights on all of validation."""
    config = small()
    model = make_model(config)[0]
    model.load_state_dict(runs["ranks"][0]["straight"]["weights"])
    boards, moves, plies = read_split(dataset, "validation")
    whole = evaluate(model, boards, moves, "cpu", plies, game="gomoku")
    two = runs["ranks"][0]["straight"]["metrics"]["validation"]
    assert two["n"] == whole["n"] == len(moves)
    assert two["top1"] == whole["top1"] and two["top5"] == whole["top5"]
    assert two["loss"] == pytest.approx(whole["loss"], rel=1e-6)
    assert two["top1_by_stage"] == whole["top1_by_stage"]


def test_two_rank_run_resumes_to_the_same_weights(runs: dict) -> None:
    resumed = runs["ranks"][0]["resumed"]
    assert resumed["metrics"]["steps"] == STEPS
    assert_same_weights(runs["ranks"][0]["straight"]["weights"], resumed["weights"])
    # the checkpoint holds every rank's loader position, and loads with weights_only
    ckpt = torch.load(runs["out"] / "two-ranks.pt", weights_only=True)
    assert ckpt["state"]["world_size"] == WORLD and len(ckpt["state"]["rank_loaders"]) == WORLD
    assert [s["rank"] for s in ckpt["state"]["rank_loaders"]] == [0, 1]


def test_checkpoints_move_between_one_and_two_ranks(dataset: Path, runs: dict) -> None:
    # a 1-rank checkpoint, resumed by 2 ranks
    from_one = runs["ranks"][0]["from_one_rank"]["metrics"]
    assert from_one["steps"] == STEPS and from_one["world_size"] == WORLD
    # a 2-rank checkpoint, resumed by 1 rank
    ckpt = runs["out"] / "two-ranks-at-kill.pt"
    from_two = train(dataset, small(), progress=False, checkpoint=ckpt).metrics
    assert from_two["steps"] == STEPS and "world_size" not in from_two
    state = torch.load(ckpt, weights_only=True)["state"]
    assert "world_size" not in state and "rank_loaders" not in state  # now a 1-rank one
    one = runs["one"].metrics
    for metrics in (from_one, from_two):
        assert abs(metrics["validation"]["top1"] - one["validation"]["top1"]) <= TOP1_TOLERANCE
        assert abs(metrics["validation"]["loss"] - one["validation"]["loss"]) <= LOSS_TOLERANCE


def test_two_ranks_cross_epochs_and_resume_across_them(few_games: Path, runs: dict) -> None:
    """Every epoch ends after the batches of the rank with the fewest, on both ranks, and the
    next starts there; a run killed in an epoch after the first resumes to the same weights;
    batches from a loader worker give the same weights too."""
    epochs = runs["ranks"][0]["epochs"]
    stream = ShardStream(few_games, batch_size=32, rank=0, world_size=WORLD)
    per_epoch = [min(stream.num_batches(epoch=e, rank=r) for r in range(WORLD))
                 for e in range(4)]
    complete = [h for h in epochs["history"] if h["complete"]]
    assert len(complete) >= 2 and epochs["metrics"]["epochs"] == len(complete)
    assert [h["step"] for h in complete] == np.cumsum(per_epoch)[:len(complete)].tolist()
    assert per_epoch[0] < EPOCHS_KILLED_AT  # killed in the second epoch or later
    for other in ("epochs_resumed", "epochs_worker_fed"):
        assert_same_weights(epochs["weights"], runs["ranks"][0][other]["weights"])
    assert_same_weights(epochs["weights"], runs["ranks"][1]["epochs"]["weights"])


def test_loader_parts_give_every_row_to_one_rank(dataset: Path) -> None:
    """One row group, 2 ranks: cut into parts, the ranks' rows are the split's, once each, in
    near-equal shares; one rank keeps whole row groups."""
    def rows(stream: ShardStream) -> list[bytes]:
        return [b.numpy().tobytes() + m.numpy().tobytes() for batch in stream
                for b, m in zip(batch["boards"], batch["moves"], strict=True)]

    options = {"batch_size": 64, "shuffle_buffer": 0, "augment": False, "drop_last": False}
    whole = ShardStream(dataset, **options)
    assert len(whole.plan.unit_rows) == 1 and whole.plan.unit_offset is None
    shares = [rows(ShardStream(dataset, rank=r, world_size=WORLD, **options))
              for r in range(WORLD)]
    assert sorted(shares[0] + shares[1]) == sorted(rows(whole))
    assert abs(len(shares[0]) - len(shares[1])) <= 0.3 * whole.rows / WORLD


def test_an_epoch_ended_early_saves_the_next_epoch(dataset: Path) -> None:
    stream = ShardStream(dataset, batch_size=64, shuffle_buffer=256, rank=1, world_size=WORLD)
    batches = iter(stream)
    for _ in range(3):
        next(batches)
    assert stream.state_dict()["epoch"] == 0 and sum(stream.state_dict()["batches"]) == 3
    stream.end_epoch(0)
    state = stream.state_dict()
    assert state["epoch"] == 1 and not any(state["batches"])
    fresh = ShardStream(dataset, batch_size=64, shuffle_buffer=256, rank=1, world_size=WORLD,
                        epoch=1)
    first, expected = next(iter(stream)), next(iter(fresh))
    assert torch.equal(first["moves"], expected["moves"])


def test_a_global_batch_that_does_not_split_is_refused(dataset: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    # as rank 0 of 2 under torchrun: refused before the rendezvous (nothing listens)
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    code = distributed.main(["--dataset", str(dataset), "--run-dir", str(tmp_path / "run"),
                             "--batch-size", "63", "--device", "cpu"])
    assert code == 2
    assert "batch_size 63 (the global batch) must be a multiple of the 2 ranks" in (
        capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_torchrun_entry_writes_on_rank_0_only(dataset: Path, tmp_path: Path) -> None:
    """`torchrun --nproc-per-node 2 -m services.trainer.distributed`: one summary, the run
    dir's checkpoint, metrics and checked TorchScript, written by rank 0."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD),
         "--master-port", str(free_port()), "-m", "services.trainer.distributed",
         "--dataset", str(dataset), "--run-dir", str(run_dir), "--model", "shao_f32_n2",
         "--steps", "10", "--batch-size", "64", "--curve-every", "2", "--log-level",
         "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count('"world_size": 2') == 1, proc.stdout  # rank 0's summary only
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint.pt", "curves.png",
                                                         "metrics.json", "model.pt"]
    summary = json.loads((run_dir / "metrics.json").read_text())
    assert [c["step"] for c in summary["curve"]] == [2, 4, 6, 8, 10]  # rank 0's loss curve
    metrics = summary["metrics"]
    assert metrics["world_size"] == WORLD and metrics["steps"] == 10
    assert metrics["validation"]["n"] == len(read_split(dataset, "validation")[1])
    scripted = torch.jit.load(str(run_dir / "model.pt"))
    assert scripted(torch.zeros(1, 15, 15, dtype=torch.int8)).shape == (1, 225)


def test_a_rerun_of_a_finished_run_does_not_publish_its_model_again(
        dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A Job applied again on its run dir resumed the finished checkpoint, took no step and
    published the same network as a new version, every time."""
    from services.repository.versions import list_versions

    repo = tmp_path / "repo"
    argv = ["--dataset", str(dataset), "--run-dir", str(tmp_path / "run"), "--model",
            "shao_f32_n2", "--steps", "4", "--batch-size", "64", "--device", "cpu",
            "--repository", str(repo), "--log-level", "WARNING"]
    assert distributed.main(argv) == 0
    first = json.loads(capsys.readouterr().out.split("\nmetrics.json")[0])["publish"]
    assert first["published"] and first["version"] == 1
    assert distributed.main(argv) == 0
    again = json.loads(capsys.readouterr().out.split("\nmetrics.json")[0])["publish"]
    assert again == {"published": False, "model_name": "gomoku_policy", "version": 1,
                     "gate": "published already by this run", "already": True}
    assert list_versions(repo, "gomoku_policy") == [1]
    assert distributed.main([*argv, "--fresh"]) == 0  # a new run: its model is published
    assert json.loads(capsys.readouterr().out.split("\nmetrics.json")[0])["publish"]["version"] == 2
    assert list_versions(repo, "gomoku_policy") == [1, 2]
