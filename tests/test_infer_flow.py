"""The `infer` flow over real Triton, the real search service and Prefect's test server.

A RenjuNet file and a 9x9 Go SGF collection, written here, give three positions after 10 moves
(a Gomoku game, a Gomoku game whose black five is followed by a white stone: no order ends
with the five's last stone, so the service answers INVALID_ARGUMENT, and a Go game) and three
games that give none (too short, a handicap, a capture). The run orders two, records the
invalid one with its message without failing, writes each game in its own format (RIF for
Gomoku, SGF for Go) with exactly the position's stones, fills summary.csv consistently with
the written orders and the actual ones, and attaches its progress and summary artifacts; a
second run from the command line answers nothing again. With the service unreachable, every
position fails after its retries, and so does the run.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from flows.infer import SUMMARY, infer_flow, main
from services.games.registry import get_game
from services.records.rif import RifGame, read_rif
from services.records.rif_writer import write_rif
from services.records.sgf import SgfGame, read_sgf
from services.records.sgf_writer import go_sgf
from tests.test_infer_sequence import closed_port, live, triton_url  # noqa: F401 (fixtures)

pytestmark = pytest.mark.usefixtures("prefect_harness")

MOVES = 10
BUDGET = dict(iterations=20, restarts=2, seed=5)
GOMOKU_GAME = ["h8", "h9", "i9", "i8", "g9", "g8", "j7", "j9", "h10", "k10", "k6"]
# black's five h8..l8 at move 9, then a white stone: the five is not the last move
FIVE_THEN_MORE = ["h8", "h9", "i8", "i9", "j8", "j9", "k8", "k9", "l8", "a1", "b2"]
GO_GAME = ["C3", "G7", "C7", "G3", "E5", "D4", "F6", "D6", "F4", "E3"]
GO_CAPTURE = ["B1", "A1", "A2", "E5", "C3", "G7", "C7", "G3", "E3", "D6"]  # A1 taken at move 3


def gomoku_points(names: list[str]) -> list[int]:
    gomoku = get_game("gomoku")
    return [gomoku.parse_move(n, 15) for n in names]


def go_points(names: list[str]) -> list[int]:
    go = get_game("go")
    return [go.parse_move(n, 9) for n in names]


def write_sources(folder: Path) -> tuple[str, str]:
    rif = write_rif([
        RifGame(source="t", game_id="1", moves=tuple(gomoku_points(GOMOKU_GAME)), rule="Gomoku"),
        RifGame(source="t", game_id="2", moves=tuple(gomoku_points(FIVE_THEN_MORE))),
        RifGame(source="t", game_id="3", moves=tuple(gomoku_points(GOMOKU_GAME[:6]))),
    ], folder / "games.rif")

    def sgf(names: list[str]) -> str:
        return go_sgf([(1 + i % 2, p) for i, p in enumerate(go_points(names))], size=9)

    handicap = sgf(GO_GAME).replace("SZ[9]", "SZ[9]HA[2]AB[aa][ii]", 1)
    assert "HA[2]" in handicap
    go = folder / "go.sgf"
    go.write_text("\n".join([sgf(GO_GAME), handicap, sgf(GO_CAPTURE)]), encoding="utf-8")
    return str(rif), str(go)


def summary_rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / SUMMARY).open(newline="", encoding="utf-8") as f:
        return {row["position_id"]: row for row in csv.DictReader(f)}


def check_order(row: dict[str, str], played: list[int], actual: list[int]) -> None:
    """The written order holds exactly the position's stones, black first and alternating,
    and the row's match figures are the written order's against the actual one."""
    assert sorted(played[0::2]) == sorted(actual[0::2])
    assert sorted(played[1::2]) == sorted(actual[1::2])
    assert row["exact_match"] == ("yes" if played == actual else "no")
    rate = sum(a == b for a, b in zip(played, actual, strict=True)) / len(actual)
    assert float(row["move_match_rate"]) == pytest.approx(rate)
    assert float(row["geometric_mean"]) >= float(row["greedy_geometric_mean"]) > 0
    assert float(row["restarts_min"]) <= float(row["restarts_max"])
    assert float(row["restarts_std"]) >= 0 and float(row["seconds"]) > 0


def task_runs(flow_run_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[flow_run_id])))


def test_infer_flow_orders_a_collection_records_the_invalid_and_resumes(
        live: str, tmp_path: Path) -> None:  # noqa: F811 (the imported fixture)
    from prefect.artifacts import Artifact

    rif, go = write_sources(tmp_path)
    out = tmp_path / "inferred"
    state = infer_flow(sources=[rif, go], out=str(out), target=live, moves=MOVES,
                       return_state=True, **BUDGET)
    result = state.result()
    assert {k: result[k] for k in ("positions", "ran", "ok", "invalid", "failed", "resumed")} \
        == {"positions": 3, "ran": 3, "ok": 2, "invalid": 1, "failed": 0, "resumed": 0}
    assert result["skipped"] == {f"shorter than {MOVES} moves": 1, "handicap or set-up stones": 1,
                                 "a capture": 1}
    runs = task_runs(state.state_details.flow_run_id)
    assert len(runs) == 3 and all(r.run_count == 1 for r in runs)  # INVALID_ARGUMENT: no retry

    rows = summary_rows(out)
    assert set(rows) == {"games.rif:0", "games.rif:1", "go.sgf:0"}
    invalid = rows["games.rif:1"]
    assert invalid["status"] == "invalid" and invalid["message"] and not invalid["record"]
    assert [rows[i]["status"] for i in ("games.rif:0", "go.sgf:0")] == ["ok", "ok"]
    assert rows["games.rif:0"]["stones"] == rows["go.sgf:0"]["stones"] == str(MOVES)

    # Gomoku: written as RenjuNet RIF, its own format
    (gomoku,) = [r for r in read_rif(out / rows["games.rif:0"]["record"]) if isinstance(r, RifGame)]
    assert rows["games.rif:0"]["record"].endswith(".rif")
    check_order(rows["games.rif:0"], list(gomoku.moves), gomoku_points(GOMOKU_GAME)[:MOVES])
    # Go: written as SGF
    assert rows["go.sgf:0"]["record"].endswith(".sgf")
    (written,) = [r for r in read_sgf(out / rows["go.sgf:0"]["record"])
                  if isinstance(r, SgfGame)]
    assert [c for c, _ in written.moves] == [1 + i % 2 for i in range(MOVES)]
    check_order(rows["go.sgf:0"], [p for _, p in written.moves], go_points(GO_GAME))
    assert sorted(f.name for f in out.iterdir()) == sorted(
        [SUMMARY, rows["games.rif:0"]["record"], rows["go.sgf:0"]["record"]])

    markdown = Artifact.get("infer-summary").data
    assert "3 run now (2 ordered, 1 invalid, 0 failed)" in markdown
    assert "| games.rif:1 | 10 | invalid |" in markdown
    assert float(Artifact.get("infer-progress").data) == pytest.approx(100.0)

    # a second run (from the command line) answers nothing again: same rows, no file
    # rewritten but the summary
    before = {f.name: f.stat().st_mtime_ns for f in out.iterdir() if f.name != SUMMARY}
    again = main([rif, go, "--out", str(out), "--target", live, "--moves", str(MOVES),
                  *(a for k, v in BUDGET.items() for a in (f"--{k}", str(v)))])
    assert (again["ran"], again["resumed"], again["ok"], again["invalid"]) == (0, 3, 0, 0)
    assert summary_rows(out) == rows
    assert {f.name: f.stat().st_mtime_ns for f in out.iterdir() if f.name != SUMMARY} == before
    assert "0 run now (0 ordered, 0 invalid, 0 failed), 3 answered before" in \
        Artifact.get("infer-summary").data
    # another budget (here the seed) is another request: the rows keyed by position id alone
    # answered it with the old orders
    reseeded = main([rif, go, "--out", str(out), "--target", live, "--moves", str(MOVES),
                     *(a for k, v in {**BUDGET, "seed": 6}.items() for a in (f"--{k}", str(v)))])
    assert (reseeded["ran"], reseeded["resumed"]) == (3, 0)

    # the service unreachable: the call is retried, then the position fails, and so the run
    stones = tmp_path / "stones.jsonl"
    stones.write_text(json.dumps({"id": "lone", "game": "go", "board_size": 9,
                                  "black": ["C3"], "white": []}) + "\n", encoding="utf-8")
    down = tmp_path / "down"
    failed = infer_flow(sources=[str(stones)], out=str(down),
                        target=f"127.0.0.1:{closed_port()}", retries=1, retry_delay_s=0,
                        return_state=True, **BUDGET)
    assert failed.is_failed()
    (row,) = summary_rows(down).values()
    assert row["status"] == "failed" and "UNAVAILABLE" in row["message"]
    (run,) = task_runs(failed.state_details.flow_run_id)
    assert run.run_count == 2  # tried, then retried once


def test_a_row_answers_only_its_own_request() -> None:
    from flows.infer import InferPosition, request_key

    budget = {"iterations": 20, "restarts": 2, "seed": 5, "max_time_ms": 0, "neighbour": "",
              "init": "", "timeout": 30.0}
    position = InferPosition("a.rif:0", "a.rif", "gomoku", 15, ("h8", "i9"), ("h9",))
    key = request_key(position, budget)
    assert request_key(position, {**budget, "timeout": 99.0}) == key  # the deadline aside
    more_moves = InferPosition("a.rif:0", "a.rif", "gomoku", 15, ("h8", "i9"), ("h9", "j9"))
    assert request_key(more_moves, budget) != key
    for changed in ({"seed": 6}, {"iterations": 30}, {"restarts": 3}, {"neighbour": "swp2"}):
        assert request_key(position, {**budget, **changed}) != key, changed


def test_a_summary_of_older_columns_is_rewritten_before_a_row_is_appended(tmp_path: Path) -> None:
    """A summary.csv without the request column got rows of 17 fields under its 16-column
    header: csv read the extra one under the key None, so those rows never counted as
    answered and ran again on every resume. The flow reads the summary (and gives it today's
    columns) before it appends."""
    from flows.infer import COLUMNS, append_row, read_summary

    old_columns = [c for c in COLUMNS if c != "request"]
    summary = tmp_path / SUMMARY
    summary.write_text(",".join(old_columns) + "\n" + "old:0,old,gomoku,15,10,ok"
                       + "," * (len(old_columns) - 6) + "\n", encoding="utf-8")
    assert set(read_summary(summary)) == {"old:0"}  # what the flow does first
    append_row(summary, {"position_id": "new:0", "status": "ok", "request": "abc"})
    rows = read_summary(summary)
    assert summary.read_text(encoding="utf-8").splitlines()[0] == ",".join(COLUMNS)
    assert rows["old:0"]["status"] == "ok" and rows["old:0"]["request"] == ""
    assert rows["new:0"]["request"] == "abc" and None not in rows["new:0"]
