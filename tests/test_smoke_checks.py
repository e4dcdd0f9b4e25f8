"""The rollout's checks that need no server: tactical positions against the rules, the
publisher's validation on real boards, extra files, version numbers past quarantined ones, the
quarantine move, the gate's floors, and the history in words (no "vNone")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from services.games.go.game import GO
from services.games.gomoku.game import GOMOKU, tactical_positions
from services.games.gomoku.rules import BLACK, WHITE, Rule, has_five, makes_five
from services.repository import gate
from services.repository.model_check import validate_model_file
from services.repository.publish import publish
from services.repository.quarantine import QUARANTINE_REASON, quarantine
from services.repository.rollout_state import describe_event
from services.repository.smoke_positions import (
    SMOKE_POSITIONS_FILE,
    read_smoke_positions,
    write_smoke_positions,
)
from services.repository.version_files import check_version_files
from services.repository.versions import (
    QUARANTINE_DIR,
    list_versions,
    next_version,
    quarantined_versions,
)
from services.triton import cli as triton_cli
from services.triton.smoke import TACTICAL_TOP_K, SmokeCheck, checks_markdown, top1_hits
from tests.triton_fixtures import (
    MODEL_NAME,
    TinyPolicy,
    build_garbage_policy,
    build_tactical_policy,
    build_tiny_policy,
    four_positions,
    make_repository,
)

pytestmark = pytest.mark.filterwarnings(
    r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning")

S = 15


def _winning(board: np.ndarray, color: int) -> set[int]:
    return {y * S + x for y in range(S) for x in range(S)
            if board[y, x] == 0 and makes_five(board, x, y, color, Rule.FREESTYLE)}


def test_tactical_positions_are_right_by_the_rules() -> None:
    positions = tactical_positions()
    assert len(positions) >= 6 and TACTICAL_TOP_K == 5
    kinds = {"take": 0, "block": 0}
    for name, (board, answers) in positions.items():
        blacks, whites = int((board == BLACK).sum()), int((board == WHITE).sum())
        assert blacks in (whites, whites + 1), name
        mover = BLACK if blacks == whites else WHITE
        assert not has_five(board), name
        wins = _winning(board, mover)
        if wins:  # the mover can win: the answer is a five, never a block
            assert set(answers) == wins, name
            kinds["take"] += 1
        else:  # the mover must block the opponent's only five
            assert set(answers) == _winning(board, 3 - mover) and answers, name
            kinds["block"] += 1
    assert kinds["take"] >= 3 and kinds["block"] >= 3


def test_four_positions_fixture_and_top1_hits() -> None:
    boards, moves = four_positions(32, seed=3)
    for board, move in zip(boards, moves, strict=True):
        blacks, whites = int((board == 1).sum()), int((board == 2).sum())
        mover = BLACK if blacks == whites else WHITE
        assert move in _winning(board, mover) | _winning(board, 3 - mover)
    logits = np.zeros((len(moves), S * S), np.float32)
    logits[np.arange(len(moves)), moves] = 1.0
    assert top1_hits(logits, boards, moves, GOMOKU).all()
    logits = boards.reshape(len(boards), -1).astype(np.float32)  # the garbage model
    assert top1_hits(logits, boards, moves, GOMOKU).mean() < 0.1
    # a stone's logit never counts, a Go pass always does
    go = np.zeros((1, 4, 9, 9), np.int8)
    go[0, 0, 0, 0] = 1
    row = np.zeros((1, 82), np.float32)
    row[0, 0], row[0, 81] = 5.0, 1.0
    assert top1_hits(row, go, np.array([81]), GO).all()


class NaNWithStones(torch.nn.Module):
    """Finite on the empty board (int8 zeros), NaN as soon as a stone is on it."""

    def __init__(self) -> None:
        super().__init__()
        self.policy = TinyPolicy()

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        empty = (boards == 0).all(dim=2).all(dim=1).float().unsqueeze(1)
        return self.policy(boards) + torch.log(empty)  # -inf where stones: log(0)


def test_validate_refuses_non_finite_outputs_on_real_boards(tmp_path: Path) -> None:
    nan = tmp_path / "nan.pt"
    torch.jit.script(NaNWithStones().eval()).save(str(nan))
    with pytest.raises(ValueError, match=r"NaN or Inf logits on the known smoke positions "
                                         r"\(centre stone, opening"):
        validate_model_file(nan)
    garbage = build_garbage_policy(tmp_path / "garbage.pt")
    with pytest.raises(ValueError, match="NaN or Inf value"):
        validate_model_file(garbage)
    repo = make_repository(tmp_path)
    with pytest.raises(ValueError, match="NaN or Inf"):
        publish(garbage, repo, MODEL_NAME)
    assert list_versions(repo, MODEL_NAME) == []
    # the stored positions are run too
    tactical = build_tactical_policy(tmp_path / "tactical.pt")
    boards, _ = four_positions(8)
    assert validate_model_file(tactical, positions=boards) is True
    with pytest.raises(ValueError, match=r"stored positions are int8 \[9, 9\]"):
        validate_model_file(tactical, positions=np.zeros((2, 9, 9), np.int8))


def test_publish_stores_extra_files_and_value_head(tmp_path: Path) -> None:
    repo = make_repository(tmp_path)
    boards, moves = four_positions(16)
    positions = tmp_path / SMOKE_POSITIONS_FILE
    write_smoke_positions(positions, boards, moves)
    tactical = build_tactical_policy(tmp_path / "tactical.pt")
    v1 = publish(tactical, repo, MODEL_NAME, extra_files={SMOKE_POSITIONS_FILE: positions})
    folder = repo / MODEL_NAME / str(v1)
    assert sorted(p.name for p in folder.iterdir()) == [
        "metadata.json", "model.pt", "model.py", SMOKE_POSITIONS_FILE]
    stored_boards, stored_moves = read_smoke_positions(folder / SMOKE_POSITIONS_FILE)
    np.testing.assert_array_equal(stored_boards, boards)
    np.testing.assert_array_equal(stored_moves, moves)
    meta = json.loads((folder / "metadata.json").read_text())
    # what the version is of: its game, and whether its policy ends with a pass (the python
    # backend reads it when the config's logits follow the board)
    assert meta["value_head"] is True and meta["game"] == "gomoku" and meta["pass_move"] is False
    v2 = publish(build_tiny_policy(tmp_path / "tiny.pt"), repo, MODEL_NAME)
    assert json.loads((repo / MODEL_NAME / str(v2) / "metadata.json").read_text()
                      )["value_head"] is False
    check_version_files(repo, MODEL_NAME, v1)  # the extra file is part of the version
    for bad in ("model.pt", "../x.npz", ".hidden", "metadata.json"):
        with pytest.raises(ValueError, match="plain file name"):
            publish(tactical, repo, MODEL_NAME, extra_files={bad: b"x"})
    assert list_versions(repo, MODEL_NAME) == [1, 2]
    with pytest.raises(ValueError, match="unreadable"):
        read_smoke_positions(b"not an npz")


def test_quarantine_moves_the_folder_and_numbers_are_never_reused(tmp_path: Path) -> None:
    repo = make_repository(tmp_path)
    tiny = build_tiny_policy(tmp_path / "tiny.pt")
    for _ in range(3):
        publish(tiny, repo, MODEL_NAME)
    checks = [SmokeCheck("tactics", False, "right answer not in the top 5")]
    moved = quarantine(repo, MODEL_NAME, 3, "smoke test failed: tactics", checks)
    assert moved == repo / MODEL_NAME / QUARANTINE_DIR / "3"
    assert list_versions(repo, MODEL_NAME) == [1, 2]
    assert quarantined_versions(repo, MODEL_NAME) == [3]
    reason = json.loads((moved / QUARANTINE_REASON).read_text())
    assert reason["reason"] == "smoke test failed: tactics" and reason["version"] == 3
    assert reason["smoke"][0]["name"] == "tactics" and reason["at"]
    assert (moved / "model.pt").is_file()
    with pytest.raises(ValueError, match=r"version 3 is quarantined: smoke test failed: tactics"):
        check_version_files(repo, MODEL_NAME, 3)
    # the next version is 4, not 3 again
    assert next_version(repo, MODEL_NAME) == 4
    assert publish(tiny, repo, MODEL_NAME) == 4
    # a hand-made folder reusing a quarantined number goes next to it, not over it
    quarantine(repo, MODEL_NAME, 4, "files: truncated")
    (repo / MODEL_NAME / "4").mkdir()
    (repo / MODEL_NAME / "4" / "model.pt").write_bytes(b"x")
    again = quarantine(repo, MODEL_NAME, 4, "again")
    assert again.name == "4-2" and quarantined_versions(repo, MODEL_NAME) == [3, 4]
    assert publish(tiny, repo, MODEL_NAME) == 5


def test_gate_floors() -> None:
    # same rows as recorded: the tolerance only
    assert gate.top1_floor(0.5, 0.01) == pytest.approx(0.49)
    # a 256-row sample of a split with top-1 0.5: two standard errors (0.0625) more
    assert gate.top1_floor(0.5, 0.01, sample_rows=256) == pytest.approx(0.49 - 0.0625)
    serving = np.array([True] * 128 + [False] * 128)
    assert gate.paired_floor(serving, serving, 0.01) == pytest.approx(0.49)
    garbage = np.zeros(256, bool)
    floor = gate.paired_floor(serving, garbage, 0.01)
    assert floor == pytest.approx(0.49 - 2 * np.sqrt(128) / 256)
    assert garbage.mean() < floor  # a garbage candidate is refused


def test_gate_compares_with_the_recorded_serving_version(tmp_path: Path) -> None:
    from services.repository.rollout_state import read_state, reference_version, write_state

    repo = make_repository(tmp_path)
    tiny = build_tiny_policy(tmp_path / "tiny.pt")
    publish(tiny, repo, MODEL_NAME)
    publish(tiny, repo, MODEL_NAME)
    assert reference_version(repo, MODEL_NAME) == 2  # no record: the newest
    state = read_state(repo, MODEL_NAME)
    write_state(repo, MODEL_NAME, {**state, "current": 1, "previous": 2})  # v2 rolled back
    assert reference_version(repo, MODEL_NAME) == 1


def test_history_in_words() -> None:
    at = "2025-01-01T00:00:00+00:00"
    assert describe_event({"at": at, "action": "rollout", "version": 7, "serving": 6,
                           "outcome": "serving"}) == f"{at}  v7 replaced v6"
    assert describe_event({"at": at, "action": "rollout", "version": 1, "serving": None,
                           "outcome": "serving"}).endswith("v1 serving (nothing served before)")
    text = describe_event({"at": at, "action": "rollout", "version": 8, "serving": 7,
                           "outcome": "refused", "reason": "smoke test failed: tactics",
                           "quarantined": "quarantine/8"})
    assert text.endswith("v8 refused (smoke test failed: tactics), v7 kept serving; moved to "
                         "quarantine/8")
    assert describe_event({"at": at, "action": "rollback", "version": 7, "serving": 8,
                           "outcome": "serving"}).endswith("rolled back v8 -> v7")
    assert "nothing was serving" in describe_event(
        {"at": at, "action": "rollout", "version": 2, "serving": None, "outcome": "refused",
         "reason": "x"})
    table = checks_markdown([SmokeCheck("agreement with serving", False, "why", blocking=False,
                                        skipped=True)])
    assert "| agreement with serving | not checked | why |" in table


def test_serving_without_triton_or_record_never_prints_vnone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from services.triton.ports import free_port

    repo = make_repository(tmp_path)
    url = f"127.0.0.1:{free_port()}"  # nothing listens there
    rc = triton_cli.cmd_serving(triton_cli.argparse.Namespace(
        triton_url=url, repository=repo, model_name=MODEL_NAME, json=False, pin=False))
    out = capsys.readouterr().out
    assert rc == triton_cli.EXIT_REFUSED
    assert "vNone" not in out and "None" not in out
    assert "unreachable" in out and "recorded current none recorded" in out
    assert "published: none; quarantined: none" in out and "history: none recorded" in out


def test_value_check_blocks_non_finite_values_of_a_value_head() -> None:
    """Triton's python model of an older publish (its own model.py copy) answers a NaN value;
    the smoke test refuses it when the version has a value head."""
    from services.triton.smoke import _value_check

    nan = [np.array([0.1, np.nan], np.float32), None]
    check = _value_check(8, True, nan)
    assert check.blocking and not check.passed and "1 of 2 values are NaN/Inf" in check.detail
    assert _value_check(8, True, [np.array([0.1, -0.2], np.float32)]).passed
    no_head = _value_check(8, False, [np.full(2, np.nan, np.float32)])
    assert no_head.passed and not no_head.blocking  # NaN by design without a value head
    unknown = _value_check(8, None, nan)
    assert not unknown.blocking and "unknown whether v8 has a value head" in unknown.detail
    assert not _value_check(8, True, [None]).blocking  # the config declares no value output
