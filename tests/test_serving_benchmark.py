"""The serving benchmark's own parts: the Python gRPC floor server answers Predict with the
stored bytes, and interleaved levels measure every target in every round, in rotating order."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from services.api.movepred.v1 import search_pb2
from services.search.client import SearchClient
from services.triton.ports import free_port

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_floor_server_answers_predict_with_the_stored_response() -> None:
    grpc_floor = _load("grpc_floor")
    stored = search_pb2.PredictResponse(model_name="gomoku_policy", model_version="3",
                                        policy=[0.25] * 4, to_move=search_pb2.COLOR_WHITE)
    port = free_port()
    server = grpc_floor.build(port, stored.SerializeToString(), max_workers=2)
    server.start()
    try:
        with SearchClient(f"127.0.0.1:{port}") as client:
            for moves in (["h8"], ["h8", "h9", "i8"]):  # whatever is asked, the stored answer
                assert client.predict(moves) == stored
    finally:
        server.stop(None)


def test_interleaved_level_measures_each_target_every_round_in_rotating_order() -> None:
    serving = _load("serving")
    lock = threading.Lock()
    order: list[tuple[str, str]] = []  # (thread, target) in call order

    def make(name: str, fail_every: int = 0):
        count = [0]

        def call() -> None:
            with lock:
                order.append((threading.current_thread().name, name))
                count[0] += 1
                failing = fail_every and count[0] % fail_every == 0
            if failing:
                raise RuntimeError("counted, not timed")

        return lambda: (call, lambda: None)

    pids = {"bench": 1}  # this test's CPU figures are not checked
    a, b = serving.run_level([make("a"), make("b", fail_every=4)], concurrency=2,
                             total_requests=12, max_seconds=30.0, warmup=1, pids=pids)
    assert len(a.latencies) == 12 and a.errors == 0
    assert len(b.latencies) + b.errors == 12 and b.errors >= 2
    assert a.wall_s > 0 and b.wall_s > 0
    firsts = set()
    per_thread: dict[str, list[str]] = {}
    for thread, name in order:
        per_thread.setdefault(thread, []).append(name)
    for names in per_thread.values():
        timed = names[2:]  # after the warm-up round
        assert len(timed) % 2 == 0
        firsts |= {timed[i] for i in range(0, len(timed), 2)}
        for i in range(0, len(timed), 2):
            assert sorted(timed[i : i + 2]) == ["a", "b"]  # a round asks every target once
    assert firsts == {"a", "b"}  # the order rotates


@pytest.mark.parametrize("targets", [1, 3])
def test_level_gives_one_timed_level_per_target(targets: int) -> None:
    serving = _load("serving")
    makes = [lambda: ((lambda: None), (lambda: None)) for _ in range(targets)]
    levels = serving.run_level(makes, concurrency=1, total_requests=5, max_seconds=30.0,
                               warmup=0, pids={"bench": 1})
    assert [len(lv.latencies) for lv in levels] == [5] * targets
    assert all(lv.throughput > 0 for lv in levels)


@pytest.mark.integration
def test_triton_throughput_measures_both_sides_against_real_triton(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The throughput benchmark's figures come from real answers: a rate for raw torch, one per
    (instances, concurrency) level from a real Triton, and the ratio of each to the baseline."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    bench = _load("triton_throughput")
    out = tmp_path / "figures.json"
    bench.main(["--model", "shao_f32_n2", "--batch", "8", "--concurrency", "1,2",
                "--instances", "1", "--seconds", "0.5", "--max-batch-size", "64",
                "--json", str(out)])
    assert "max_batch_size 64" in capsys.readouterr().out  # the config Triton ran with
    figures = json.loads(out.read_text())
    assert figures["torch_host"] > 0 and figures["torch_device"] > 0
    levels = [(r["instances"], r["concurrency"]) for r in figures["triton"]]
    assert levels == [(1, 1), (1, 2)]
    for row in figures["triton"]:
        assert row["boards_per_s"] > 0
        assert row["ratio"] == pytest.approx(row["boards_per_s"] / figures["torch_host"])
    assert figures["best"] in figures["triton"]


def test_triton_throughput_boards_are_positions_of_the_game() -> None:
    bench = _load("triton_throughput")
    boards = bench.random_boards(64, 15)
    assert boards.shape == (64, 15, 15) and boards.dtype.name == "int8"
    assert set(np.unique(boards)) <= {0, 1, 2} and (boards == 0).mean() > 0.5
