"""Plumbing of the fault suite (benchmarks/faults.py) and the fuzzer (benchmarks/fuzz.py).

The figures themselves are benchmark output (docs/reliability.md); these tests check that the
parts the figures rest on do what they claim: the suite's reference network answers the
tactical positions a smoke test asks about, a failing scenario is reported as failed instead of
stopping the suite, the doc sections are replaced independently, the fuzzer counts and saves
crashes but not documented errors, and one real scenario runs end to end on a real Triton.
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    path = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


faults = _load("faults")
fuzz = _load("fuzz")


def _board(black: list[tuple[int, int]], white: list[tuple[int, int]]) -> np.ndarray:
    board = np.zeros((15, 15), dtype=np.int8)
    for x, y in black:
        board[y, x] = 1
    for x, y in white:
        board[y, x] = 2
    return board


def _top(model: torch.jit.ScriptModule, board: np.ndarray) -> int:
    logits, value = model(torch.from_numpy(board[None]))
    assert torch.isfinite(value).all()
    masked = logits[0].masked_fill(torch.from_numpy(board.ravel() != 0), -1e9)
    return int(masked.argmax())


def test_window_policy_takes_a_five_and_blocks_a_four(tmp_path: Path) -> None:
    model = torch.jit.load(str(faults.save_script(faults.WindowPolicy(), tmp_path / "w.pt")))
    # black to move (4 stones each): f8-i8 is black's four, e8 or j8 makes five
    five = _board([(5, 7), (6, 7), (7, 7), (8, 7)], [(7, 8), (8, 8), (9, 8), (6, 9)])
    assert _top(model, five) in (7 * 15 + 4, 7 * 15 + 9)
    # black to move (3 vs 3 stones... white has four on row 3 after black's 4 moves): block it
    block = _board([(0, 0), (0, 2), (14, 14), (14, 12)], [(3, 3), (4, 3), (5, 3), (6, 3)])
    assert _top(model, block) in (3 * 15 + 2, 3 * 15 + 7)
    assert _top(model, _board([], [])) == 7 * 15 + 7  # the centre on an empty board


def test_corrupt_kinds_are_refused_by_the_publisher_test_run(tmp_path: Path) -> None:
    from services.repository.model_check import validate_model_file

    good = faults.save_script(faults.WindowPolicy(), tmp_path / "good.pt")
    assert validate_model_file(good) is True  # a value head
    for kind in faults.CORRUPT_KINDS:
        bad = faults.corrupt_file(kind, good, tmp_path)
        with pytest.raises(ValueError):
            validate_model_file(bad)


def test_a_scenario_that_raises_is_reported_failed(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(path: Path, games: int, seed: int = 0) -> Path:
        raise OSError("no space left on device")

    monkeypatch.setattr(faults, "make_corpus", broken)
    (outcome,) = faults.run_suite(["ingest-kill"], quick=True, soak_seconds=1, root=tmp_path)
    assert not outcome.passed
    assert outcome.failures == ["OSError: no space left on device"]
    table = faults.report([outcome], "cpu, 2 cores", "2024-01-01", "cmd")
    assert "| ingest-kill | FAIL: OSError: no space left on device |" in table


def test_doc_sections_are_replaced_independently(tmp_path: Path) -> None:
    doc = tmp_path / "reliability.md"
    faults.write_doc_section(doc, faults.DOC_BEGIN, faults.DOC_END, "faults v1", "Fault suite")
    fuzz.write_doc_section(doc, fuzz.DOC_BEGIN, fuzz.DOC_END, "fuzz v1", "Fuzzing")
    faults.write_doc_section(doc, faults.DOC_BEGIN, faults.DOC_END, "faults v2", "Fault suite")
    text = doc.read_text()
    assert "faults v2" in text and "fuzz v1" in text and "faults v1" not in text
    assert text.count("## Fault suite") == 1 and text.count("## Fuzzing") == 1


def test_fuzzer_counts_and_saves_crashes_but_not_documented_errors(tmp_path: Path) -> None:
    def run(data: bytes) -> None:
        if data[0] % 3 == 0:
            raise KeyError("documented")
        if data[0] % 3 == 1:
            raise IndexError("a crash")

    target = fuzz.Target("t", lambda: [b""], lambda rng, seeds: rng.randbytes(4), run,
                         lambda: (KeyError,), bytes, "KeyError")
    tally = fuzz.fuzz_target(target, 300, 100, 0, tmp_path, slow_s=10.0)
    assert tally.inputs == 300
    assert tally.crashes > 0 and tally.expected_errors > 0
    assert tally.crashes + tally.expected_errors < 300
    saved = list((tmp_path / "t").glob("*.bin"))
    assert saved and all(p.read_bytes()[0] % 3 == 1 for p in saved)
    assert "IndexError" in saved[0].with_suffix(".txt").read_text()
    assert list(tally.signatures) == ["IndexError at ?"]


@pytest.mark.parametrize("name", fuzz.TARGET_NAMES)
def test_fuzz_targets_run_their_inputs(name: str) -> None:
    """Each target's generator and harness work together (a crash here is a finding)."""
    target = fuzz._targets()[name]
    seeds = target.seeds()
    rng = random.Random(0)
    expected = target.expected()
    for _ in range(50):
        item = target.make(rng, seeds)
        with contextlib.suppress(*expected):
            target.run(item)
        assert isinstance(target.to_bytes(item), bytes)


def test_publish_disk_full_scenario_end_to_end(tmp_path: Path) -> None:
    from tests.triton_fixtures import require_tritonserver

    require_tritonserver()
    (outcome,) = faults.run_suite(["publish-disk-full"], quick=True, soak_seconds=1,
                                  root=tmp_path)
    assert outcome.passed, outcome.failures
    names = [f.name for f in outcome.figures]
    assert "publish" in names and "left in the model folder" in names


def test_triton_hang_scenario_end_to_end(tmp_path: Path) -> None:
    """A hung Triton (SIGSTOP): calls sent during the hang end DEADLINE_EXCEEDED, health goes
    NOT_SERVING and back, and no answer is wrong. Its timing goals are the benchmark's to
    judge on a quiet machine, not this test's."""
    from tests.triton_fixtures import require_tritonserver

    require_tritonserver()
    (outcome,) = faults.run_suite(["triton-hang"], quick=True, soak_seconds=1, root=tmp_path)
    figures = {f.name: f for f in outcome.figures}
    assert "DEADLINE_EXCEEDED" in figures["Predicts (by code)"].value, figures
    assert figures["time to health NOT_SERVING"].value != "never", figures
    assert figures["resumed -> health SERVING"].value != "never", figures
    assert figures["resumed -> first OK Predict"].value != "never", figures
    assert figures["wrong answers"].passed, figures["wrong answers"]
    assert figures["GenMoves (by code)"].passed, figures["GenMoves (by code)"]


def test_soak_spans_split_cpu_between_the_suite_and_other_processes() -> None:
    samples = [faults.Sample(t, 70.0, service, machine, suite) for t, service, machine, suite in
               ((0.0, 1.0, 100.0, 10.0), (30.0, 4.0, 160.0, 40.0), (60.0, 7.0, 250.0, 70.0))]
    head = faults.Sample.span(samples, 0.0, 30.0)
    assert head.service_cpu == pytest.approx(3.0)
    assert head.other_cores == pytest.approx((60.0 - 30.0) / 30.0)
    tail = faults.Sample.span(samples, 30.0, 60.0)
    assert tail.other_cores == pytest.approx((90.0 - 30.0) / 30.0)
