"""`movepred analysis-engine`: KataGo's JSON analysis protocol over the search service.

First part (always runs): queries checked line by line against KataGo's docs/Analysis_Engine.md
and the engine source it describes (cpp/command/analysis.cpp: the error lines word for word,
the warnings, the actions' echoes), the positions a query becomes (set-up stones, the side to
move, non-alternating moves, games after two passes, Gomoku through its rule names), the
response layout (moveInfos, rootInfo, the policy array with -1 and the pass last, the
perspective), and the engine's threads with the search client replaced by a small scripted
stand-in of `SearchClient`'s two calls (analyze, predict): terminate of a queued and of a
running turn, reports during the search, priorities, the end of the input.

Second part (skipped without a ``tritonserver`` binary): a real Triton serving the test Go
model and the tiny Gomoku policy, a real search service in-process, and `movepred
analysis-engine` as a subprocess fed KataGo's documented example query and others one line at
a time (Go 19x19 and 9x9, Gomoku 15x15, the policy, an error, a terminated long search).
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from services import cli
from services.api.movepred.v1 import search_pb2
from services.games.base import BLACK, WHITE
from services.games.registry import get_game
from services.protocols.katago_analysis import (
    AnalysisEngine,
    analysis_response,
    policy_array,
    position_hashes,
)
from services.protocols.katago_query import (
    KATAGO_RULES,
    QueryError,
    parse_go_rules,
    parse_location,
    parse_query,
)
from tests.service_pipe import ServicePipe

# KataGo's example query (docs/Analysis_Engine.md), as one line
DOC_QUERY = {"id": "foo", "initialStones": [["B", "Q4"], ["B", "C4"]],
             "moves": [["W", "P5"], ["B", "P6"]], "rules": "tromp-taylor", "komi": 7.5,
             "boardXSize": 19, "boardYSize": 19, "analyzeTurns": [0, 1, 2]}


def go_query(**fields: Any) -> dict[str, Any]:
    return {"id": "q", "moves": [], "rules": "chinese", "komi": 7.5, "boardXSize": 9,
            "boardYSize": 9, **fields}


def names(points: Any, size: int) -> list[str]:
    from services.coords import gtp_vertex

    return ["pass" if p.is_pass else gtp_vertex(p.y * size + p.x, size) for p in points]


# --------------------------------------------------------------------------- queries


def test_the_documented_example_query_becomes_three_turns() -> None:
    parsed = parse_query(DOC_QUERY)
    assert [j.turn for j in parsed.jobs] == [0, 1, 2]
    first = parsed.jobs[0].position
    assert names(first.setup_black, 19) == ["C4", "Q4"] and not first.setup_white
    assert first.board_size == 19 and first.komi == 7.5 and first.game_name == "go"
    # white moves first after two black stones (KataGo: the first move's player)
    assert [j.state.to_move for j in parsed.jobs] == [WHITE, BLACK, WHITE]
    assert [names(j.position.moves, 19) for j in parsed.jobs] == [[], ["P5"], ["P5", "P6"]]
    assert all(j.position.first_to_move == WHITE for j in parsed.jobs)
    # tromp-taylor is not what the service plays: KataGo's "not supported" warning on rules
    (field, message), = parsed.warnings
    assert field == "rules" and "tromp-taylor" in message and "ko POSITIONAL" in message
    assert "suicide allowed" in message


def test_turns_default_to_the_last_and_the_first_player_follows_katago() -> None:
    parsed = parse_query(go_query(moves=[["B", "E5"], ["W", "C3"]]))
    assert [j.turn for j in parsed.jobs] == [2] and parsed.jobs[0].state.to_move == BLACK
    assert not parsed.warnings  # chinese without handicap stones: the rules served
    handicap = parse_query(go_query(initialStones=[["B", "C3"], ["B", "G7"]]))
    assert handicap.jobs[0].state.to_move == WHITE  # handicap stones on board: white first
    assert handicap.warnings[0][0] == "rules"  # chinese gives white N points: not served
    chosen = parse_query(go_query(initialPlayer="W"))
    assert chosen.jobs[0].state.to_move == WHITE


def test_non_alternating_moves_and_moves_after_two_passes_are_sent_from_set_up() -> None:
    parsed = parse_query(go_query(
        moves=[["B", "E5"], ["B", "C3"], ["W", "G7"], ["B", "pass"], ["W", "pass"],
               ["B", "D4"]],
        analyzeTurns=[1, 2, 3, 5, 6]))
    by_turn = {j.turn: j for j in parsed.jobs}
    assert names(by_turn[1].position.moves, 9) == ["E5"]
    # black played twice: the board before the second black move is set-up, black to move
    two = by_turn[2].position
    assert names(two.setup_black, 9) == ["E5"] and names(two.moves, 9) == ["C3"]
    assert two.first_to_move == BLACK
    assert names(by_turn[3].position.moves, 9) == ["C3", "G7"]
    # after two passes the game goes on from the board as it stands
    after = by_turn[6].position
    assert sorted(names(after.setup_black, 9)) == ["C3", "E5"]
    assert names(after.setup_white, 9) == ["G7"] and names(after.moves, 9) == ["D4"]
    assert by_turn[6].state.to_move == WHITE
    over = by_turn[5]  # turn 5, after the two passes: sent as the board, black to move
    assert not over.position.moves and len(over.position.setup_black) == 2
    assert over.state.to_move == BLACK and not over.state.is_over
    assert names(by_turn[3].position.moves, 9)[-1] == "G7"


def test_locations_gtp_vertices_and_katago_pairs() -> None:
    assert parse_location("Q16", 19) == 15 * 19 + 15
    assert parse_location("q16", 19) == parse_location("Q16", 19)
    assert parse_location("pass", 9) == 81 and parse_location("PASS", 9) == 81
    assert parse_location("(0,0)", 9) == 8 * 9 + 0  # KataGo counts y from the top: A9
    assert parse_location("(8, 8)", 9) == 8  # J1
    for bad in ("I5", "Z1", "A10", "(9,0)", "(0,-1)", "(1,2,3)", "", "Ｑ16", "D"):
        assert parse_location(bad, 9) is None, bad


def test_gomoku_is_reached_through_its_rule_names() -> None:
    parsed = parse_query({"id": "g", "moves": [["B", "H8"], ["W", "J9"]], "rules": "renju",
                          "boardXSize": 15, "boardYSize": 15, "komi": 0})
    job, = parsed.jobs
    gomoku = get_game("gomoku")
    assert job.query.game is gomoku and job.position.game_name == "gomoku"
    assert job.position.rule == gomoku.proto_rule("renju")
    assert not job.position.HasField("komi")
    assert names(job.position.moves, 15) == ["H8", "J9"]  # GTP letters: no I
    assert parsed.warnings == [("komi", "Gomoku has no komi; ignored")]
    with pytest.raises(QueryError) as info:
        parse_query({"id": "g", "moves": [], "rules": "freestyle", "boardXSize": 19,
                     "boardYSize": 19})
    assert info.value.field == "boardXSize" and "15x15 only" in info.value.message
    with pytest.raises(QueryError) as info:
        parse_query({"id": "g", "moves": [["B", "H8"], ["W", "pass"]], "rules": "freestyle",
                     "boardXSize": 15, "boardYSize": 15})
    assert (info.value.field, info.value.message) == ("moves", "Illegal move 1: pass")


def test_katago_rules_values() -> None:
    assert parse_go_rules("Chinese") == KATAGO_RULES["chinese"]
    assert parse_go_rules("japanese").scoring == "TERRITORY"
    assert parse_go_rules("japanese").komi == 6.5
    custom = parse_go_rules({"ko": "SIMPLE", "scoring": "AREA", "suicide": False,
                             "whiteHandicapBonus": "0"})
    assert custom is not None and not custom.differences(KATAGO_RULES["chinese"])
    for bad in ("go", {"ko": "SUPER"}, {"komi": 7.2}, {"unknown": 1}, 5):
        assert parse_go_rules(bad) is None, bad


# every line: what KataGo answers, word for word (cpp/command/analysis.cpp)
ERROR_LINES = [
    ('{"id":"a","moves":[],"rules":"chinese","boardXSize":9}',
     {"id": "a", "field": "boardYSize", "error": "Must provide an integer from 2 to 19"}),
    ('{"id":"a","moves":[],"rules":"chinese","boardXSize":25,"boardYSize":25}',
     {"id": "a", "field": "boardXSize", "error": "Must provide an integer from 2 to 19"}),
    ('{"id":"a","moves":[],"rules":"chinese","boardXSize":9.0,"boardYSize":9}',
     {"id": "a", "field": "boardXSize", "error": "Must provide an integer from 2 to 19"}),
    ('{"id":"a","rules":"chinese","boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "moves", "error": "Must specify an array of [player,location] pairs"}),
    ('{"id":"a","moves":[["X","D4"]],"rules":"chinese","boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "moves", "error": "Could not parse player: X"}),
    ('{"id":"a","moves":[["B","D4","x"]],"rules":"chinese","boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "moves",
      "error": 'Must be an array of pairs of the form: ["b" or "w", GTP board vertex]'}),
    ('{"id":"a","moves":[["B","T19"]],"rules":"chinese","boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "moves", "error": "Could not parse board location: T19"}),
    ('{"id":"a","initialStones":[["B","pass"]],"moves":[],"rules":"chinese","boardXSize":9,'
     '"boardYSize":9}',
     {"id": "a", "field": "initialStones", "error": "Could not parse board location: pass"}),
    ('{"id":"a","moves":[],"initialPlayer":"red","rules":"chinese","boardXSize":9,'
     '"boardYSize":9}',
     {"id": "a", "field": "initialPlayer", "error": 'Must be "b" or "w"'}),
    ('{"id":"a","moves":[["B","D4"]],"analyzeTurns":[2],"rules":"chinese","boardXSize":9,'
     '"boardYSize":9}',
     {"id": "a", "field": "analyzeTurns", "error": "Invalid turn number: 2"}),
    ('{"id":"a","moves":[],"analyzeTurns":"0","rules":"chinese","boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "analyzeTurns",
      "error": "Must specify an array of integers indicating turns to analyze"}),
    ('{"id":"a","moves":[],"priorities":[1],"rules":"chinese","boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "priorities",
      "error": "Can only specify when also specifying analyzeTurns"}),
    ('{"id":"a","moves":[],"boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "rules", "error": 'Must specify rules string, such as "chinese" or '
      '"tromp-taylor", or a JSON object with detailed rules parameters.'}),
    ('{"id":"a","moves":[],"rules":"go","boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "rules", "error": "Could not parse rules: go"}),
    ('{"id":"a","moves":[],"rules":"chinese","komi":7.3,"boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "komi",
      "error": "Must be a integer or half-integer from -400.0 to 400.0"}),
    ('{"id":"a","moves":[],"rules":"chinese","maxVisits":0,"boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "maxVisits", "error": "Must be an integer from 1 to 2^50"}),
    ('{"id":"a","moves":[],"rules":"chinese","includePolicy":1,"boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "includePolicy", "error": "Must be a boolean"}),
    ('{"id":"a","moves":[],"rules":"chinese","reportDuringSearchEvery":0,"boardXSize":9,'
     '"boardYSize":9}',
     {"id": "a", "field": "reportDuringSearchEvery",
      "error": "Must be number of seconds from 0.001 to 1000000.0"}),
    ('{"id":"a","moves":[],"rules":"chinese","priority":1,"priorities":[1],"analyzeTurns":[0],'
     '"boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "priority", "error": "Cannot specify both priority and priorities"}),
    ('{"id":"a","moves":[],"rules":"chinese","avoidMoves":[{"player":"B"}],"boardXSize":9,'
     '"boardYSize":9}',
     {"id": "a", "field": "avoidMoves",
      "error": "Must be a list of dicts with subfields 'player', 'moves', 'untilDepth'"}),
    ('{"id":"a","moves":[["B","D4"],["W","D4"]],"rules":"chinese","boardXSize":9,'
     '"boardYSize":9}',
     {"id": "a", "field": "moves", "error": "Illegal move 1: D4"}),
    # what the service cannot serve, in KataGo's shape
    ('{"id":"a","moves":[],"rules":"chinese","boardXSize":7,"boardYSize":7}',
     {"id": "a", "field": "boardXSize", "error": "Go is served on sizes 9 to 19, got 7"}),
    ('{"id":"a","moves":[],"rules":"chinese","boardXSize":9,"boardYSize":13}',
     {"id": "a", "field": "boardYSize",
      "error": "Must equal boardXSize: only square boards are served"}),
    ('{"id":"a","moves":[],"rules":"chinese","komi":100,"boardXSize":9,"boardYSize":9}',
     {"id": "a", "field": "komi", "error": "must be finite and within +-81, got 100.0"}),
    # general errors: no id
    ('{"id":"a","moves":[]', None),
    ('{"id":"a","komi":NaN}', None),  # not JSON (Python's parser would take it)
    ("[" * 100_000, None),  # nested deeper than the parser goes
    ('[1,2]', {"error": "Request line was valid json but was not an object, ignoring: [1,2]"}),
    ('{"moves":[]}', {"error": 'Request must have a string "id" field'}),
    ('{"id":7}', {"error": 'Request must have a string "id" field'}),
    ('{"id":"a","action":"fly"}', {"error": "'action' field must be 'query_version' or "
                                   "'query_models' or 'clear_cache' or 'terminate' or "
                                   "'terminate_all'"}),
    ('{"id":"a","action":"terminate"}',
     {"id": "a", "field": "terminateId",
      "error": 'Requests for a terminate action must have a string "terminateId" field'}),
    ('{"id":"a","action":"terminate_all","turnNumbers":[1.5]}',
     {"id": "a", "field": "turnNumbers",
      "error": "If provided, must be an array of integers indicating turns to terminate"}),
]


class Lines:
    """A thread-safe stdout: each written line, parsed, on a queue."""

    def __init__(self) -> None:
        self.queue: queue.Queue[dict] = queue.Queue()
        self._buffer = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        with self._lock:
            self._buffer += text
            *whole, self._buffer = self._buffer.split("\n")
        for line in whole:
            self.queue.put(json.loads(line))

    def flush(self) -> None:
        pass

    def get(self, timeout: float = 10.0) -> dict:
        return self.queue.get(timeout=timeout)

    def rest(self) -> list[dict]:
        out = []
        while not self.queue.empty():
            out.append(self.queue.get())
        return out


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def no_client() -> Any:
    raise AssertionError("a refused query reached the search service")


@pytest.mark.parametrize("line, expected", ERROR_LINES)
def test_error_lines_as_katago_writes_them(line: str, expected: dict | None) -> None:
    out = Lines()
    engine = AnalysisEngine("unused:1", out=out, client_factory=no_client, threads=1)
    try:
        engine.handle(line)
        answer = out.get()
        if expected is None:  # a JSON syntax error: the parser's words, then KataGo's
            assert set(answer) == {"error"}
            assert answer["error"].endswith(
                f" - could not parse input line as json request: {line}")
        else:
            assert answer == expected
        assert out.rest() == []  # one line, and nothing queued
    finally:
        engine.finish()


def test_warnings_come_first_and_the_query_still_runs() -> None:
    out = Lines()
    engine = AnalysisEngine("unused:1", out=out, client_factory=lambda: ScriptedClient(),
                            threads=1)
    try:
        query = go_query(includeOwnership=True,
                         overrideSettings={"maxVisits": 3, "wideRootNoise": 0.1},
                         avoidMoves=[{"player": "B", "moves": ["A1"], "untilDepth": 1}],
                         rootPolicyTemperature=1.5, tpyo=1)
        engine.handle(json.dumps(query))
        lines = [out.get() for _ in range(6)]
    finally:
        engine.finish()
    warnings = {w["field"]: w["warning"] for w in lines[:5]}
    assert all(set(w) == {"id", "field", "warning"} for w in lines[:5])
    assert set(warnings) == {"overrideSettings", "rootPolicyTemperature", "avoidMoves",
                             "includeOwnership", "tpyo"}
    assert "wideRootNoise" in warnings["overrideSettings"]
    assert warnings["tpyo"] == "Unexpected or unused field, do you have a typo?"
    result = lines[5]
    assert result["id"] == "q" and result["isDuringSearch"] is False
    assert result["rootInfo"]["visits"] == 3  # overrideSettings' maxVisits


def test_actions_are_echoed() -> None:
    out = Lines()
    engine = AnalysisEngine("unused:1", out=out, client_factory=no_client, threads=1)
    try:
        engine.handle('{"id":"v","action":"query_version"}')
        version = out.get()
        assert version["id"] == "v" and version["action"] == "query_version"
        assert isinstance(version["version"], str) and isinstance(version["git_hash"], str)
        engine.handle('{"id":"c","action":"clear_cache"}')
        assert out.get() == {"id": "c", "action": "clear_cache"}
        engine.handle('{"id":"t","action":"terminate","terminateId":"x","turnNumbers":[1]}')
        assert out.get() == {"id": "t", "action": "terminate", "terminateId": "x",
                             "turnNumbers": [1]}
    finally:
        engine.finish()


# --------------------------------------------------------------------------- responses


def report(size: int, total: int, value: float, candidates: list[tuple[str, int, float, float,
                                                                       list[str]]],
           final: bool = True) -> search_pb2.AnalyzeResponse:
    from services.coords import parse_gtp_vertex

    def point(name: str) -> search_pb2.Point:
        p = parse_gtp_vertex(name, size)
        return search_pb2.Point(is_pass=True) if p is None else \
            search_pb2.Point(x=p % size, y=p // size)

    return search_pb2.AnalyzeResponse(
        total_visits=total, value=value, final=final,
        candidates=[search_pb2.MoveCandidate(move=point(m), name=m, visits=v, value=q,
                                             prior=prior,
                                             principal_variation=[point(x) for x in pv])
                    for m, v, q, prior, pv in candidates])


def test_analysis_response_layout_and_perspective() -> None:
    job = parse_query(go_query(moves=[["B", "E5"]], analysisPVLen=1)).jobs[0]  # white to move
    r = report(9, 10, 0.2, [("C3", 6, 0.5, 0.4, ["C3", "D4", "E3"]),
                            ("G7", 3, -0.5, 0.3, ["G7"]), ("A1", 0, 0.0, 0.01, [])])
    out = analysis_response(job, r, during=False)
    assert set(out) == {"id", "turnNumber", "isDuringSearch", "moveInfos", "rootInfo"}
    assert (out["id"], out["turnNumber"], out["isDuringSearch"]) == ("q", 1, False)
    first, second = out["moveInfos"]  # unvisited moves are not reported (as KataGo)
    assert first["move"] == "C3" and first["order"] == 0 and second["order"] == 1
    assert first["pv"] == ["C3", "D4"]  # analysisPVLen 1: one move after the first
    assert first["visits"] == first["edgeVisits"] == 6 and first["prior"] == pytest.approx(0.4)
    # black's view (the default): white's Q 0.5 is black's winrate 0.25
    assert first["winrate"] == pytest.approx(0.25) and first["utility"] == pytest.approx(-0.5)
    assert first["lcb"] > first["winrate"]  # flipped as KataGo flips it: 1 - lcb
    assert second["winrate"] == pytest.approx(0.75)
    root = out["rootInfo"]
    assert root["currentPlayer"] == "W" and root["visits"] == 10
    assert root["winrate"] == pytest.approx(0.4) and root["utility"] == pytest.approx(-0.2)
    assert len(root["thisHash"]) == 32 and len(root["symHash"]) == 32
    for absent in ("scoreLead", "scoreMean", "scoreStdev", "ownership"):
        assert absent not in first and absent not in root and absent not in out
    side = parse_query(go_query(moves=[["B", "E5"]],
                                overrideSettings={"reportAnalysisWinratesAs": "SIDETOMOVE"}))
    mine = analysis_response(side.jobs[0], r, during=True)
    assert mine["isDuringSearch"] is True
    assert mine["moveInfos"][0]["winrate"] == pytest.approx(0.75)
    assert mine["moveInfos"][0]["lcb"] < 0.75
    assert mine["rootInfo"]["winrate"] == pytest.approx(0.6)


def test_symmetric_positions_share_sym_hash() -> None:
    a = parse_query(go_query(moves=[["B", "C3"]])).jobs[0].state
    b = parse_query(go_query(moves=[["B", "G7"]])).jobs[0].state
    c = parse_query(go_query(moves=[["B", "C4"]])).jobs[0].state
    assert position_hashes(a)[0] != position_hashes(b)[0]
    assert position_hashes(a)[1] == position_hashes(b)[1] != position_hashes(c)[1]


def test_policy_array_row_major_from_the_top_left_with_the_pass_last() -> None:
    job = parse_query(go_query(moves=[["B", "A9"], ["W", "J1"]])).jobs[0]
    probs = [0.0] * 82
    probs[8 * 9 + 1] = 0.5  # B9: top row, second column
    probs[81] = 0.25  # the pass
    probs[0] = 0.25  # A1: the bottom-left, first entry of the last row
    reply = search_pb2.PredictResponse(policy=probs, value=0.5)
    out = policy_array(job, reply)
    policy = out["policy"]
    assert len(policy) == 82
    assert policy[0] == -1  # A9 is occupied: illegal
    assert policy[1] == 0.5 and policy[72] == 0.25 and policy[81] == 0.25
    assert policy[80] == -1  # J1 occupied
    assert out["rawWinrate"] == pytest.approx(0.75)  # black to move, black's view
    gomoku = parse_query({"id": "g", "moves": [["B", "H8"]], "rules": "freestyle",
                          "boardXSize": 15, "boardYSize": 15}).jobs[0]
    g = policy_array(gomoku, search_pb2.PredictResponse(policy=[1 / 224] * 225))
    assert len(g["policy"]) == 226 and g["policy"][-1] == -1  # no pass in Gomoku
    assert g["policy"][7 * 15 + 7] == -1 and "rawWinrate" not in g  # H8 occupied


# --------------------------------------------------------------------------- the engine


class CancelledError(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.CANCELLED

    def details(self) -> str:
        return "Locally cancelled by application!"


class ScriptedCall:
    """A streaming call of the stand-in client: `reports` reports growing to the request's
    visits; with `hold`, it stops after the first report until cancelled."""

    def __init__(self, request: dict, hold: bool) -> None:
        self.request = request
        self.hold = hold
        self.cancelled = threading.Event()

    def __iter__(self) -> Iterator[search_pb2.AnalyzeResponse]:
        visits = self.request["max_visits"]
        yield report(9, 1, 0.0, [("E5", 1, 0.1, 0.5, ["E5"])], final=False)
        if self.hold:
            assert self.cancelled.wait(10), "never cancelled"
            raise CancelledError()
        time.sleep(0.01)  # time passes during a search: reportDuringSearchEvery has its turn
        half = visits // 2
        yield report(9, half, 0.0, [("E5", half - 1, 0.1, 0.5, ["E5"])], final=False)
        yield report(9, visits, 0.0, [("E5", visits - 1, 0.1, 0.5, ["E5", "D4"])])

    def cancel(self) -> None:
        self.cancelled.set()


class ScriptedClient:
    """What the engine asks of `SearchClient` (analyze, predict, close), scripted: the
    searches of positions with `hold_moves` moves wait for their cancellation."""

    def __init__(self, hold_moves: int | None = None) -> None:
        self.hold_moves = hold_moves
        self.calls: list[tuple[str, dict]] = []
        self.started = threading.Event()

    def analyze(self, position: search_pb2.Position, **kwargs: Any) -> ScriptedCall:
        self.calls.append(("analyze", {"moves": len(position.moves), **kwargs}))
        self.started.set()
        return ScriptedCall(kwargs, hold=len(position.moves) == self.hold_moves)

    def predict(self, position: search_pb2.Position, **kwargs: Any) -> search_pb2.PredictResponse:
        self.calls.append(("predict", kwargs))
        return search_pb2.PredictResponse(policy=[1 / 82] * 82)

    def close(self) -> None:
        pass


def test_terminate_answers_queued_turns_with_no_results_and_stops_a_running_one() -> None:
    client = ScriptedClient(hold_moves=0)
    out = Lines()
    engine = AnalysisEngine("unused:1", out=out, client_factory=lambda: client, threads=1)
    try:
        engine.handle(json.dumps(go_query(id="a", moves=[["B", "E5"], ["W", "C3"]],
                                          analyzeTurns=[0, 1, 2], maxVisits=50)))
        assert client.started.wait(10)  # turn 0 runs (and holds); 1 and 2 wait in the queue
        engine.handle('{"id":"t","action":"terminate","terminateId":"a","turnNumbers":[0,2]}')
        lines = [out.get() for _ in range(4)]
    finally:
        engine.finish()
    by_kind: dict[str, list[dict]] = {"ack": [], "none": [], "final": []}
    for line in lines:
        kind = ("ack" if line.get("action") else "none" if line.get("noResults")
                else "final")
        by_kind[kind].append(line)
    assert by_kind["none"] == [{"id": "a", "turnNumber": 2, "isDuringSearch": False,
                                "noResults": True}]
    assert by_kind["ack"] == [{"id": "t", "action": "terminate", "terminateId": "a",
                               "turnNumbers": [0, 2]}]
    finals = sorted(by_kind["final"], key=lambda x: x["turnNumber"])
    # turn 0: what the search had reported when it was cancelled; turn 1: searched in full
    assert [f["turnNumber"] for f in finals] == [0, 1]
    assert finals[0]["rootInfo"]["visits"] == 1 and finals[0]["isDuringSearch"] is False
    assert finals[1]["rootInfo"]["visits"] == 50
    assert [c[1]["moves"] for c in client.calls] == [0, 1]  # turn 2 never reached the service


def test_reports_during_search_priorities_and_policy() -> None:
    client = ScriptedClient()
    out = Lines()
    engine = AnalysisEngine("unused:1", out=out, client_factory=lambda: client, threads=1)
    try:
        engine.handle(json.dumps(go_query(id="low", moves=[["B", "E5"]], maxVisits=20)))
        engine.handle(json.dumps(go_query(id="d", moves=[["B", "E5"], ["W", "C3"]],
                                          analyzeTurns=[1, 2], priorities=[1, 5], maxVisits=20,
                                          reportDuringSearchEvery=0.001, includePolicy=True)))
        engine.finish()  # the end of the input: every queued turn is answered first
    finally:
        engine.finish()
    lines = out.rest()
    finals = [(x["id"], x["turnNumber"]) for x in lines if not x["isDuringSearch"]]
    assert len(finals) == 3 and set(finals) == {("low", 1), ("d", 1), ("d", 2)}
    # the first query may already have started; the second's turns go by priority
    assert finals.index(("d", 2)) < finals.index(("d", 1))
    during = [x for x in lines if x["isDuringSearch"]]
    assert {x["turnNumber"] for x in during} == {1, 2} and all(x["id"] == "d" for x in during)
    assert all(len(x["policy"]) == 82 for x in lines if x["id"] == "d")
    assert all("policy" not in x for x in lines if x["id"] == "low")
    analyze = [kw for name, kw in client.calls if name == "analyze"]
    assert all(kw["max_visits"] == 20 for kw in analyze)


def test_service_failures_answer_each_turn_with_an_error() -> None:
    out = Lines()
    target = f"127.0.0.1:{closed_port()}"
    engine = AnalysisEngine(target, out=out, threads=1)
    try:
        engine.handle(json.dumps(go_query(id="x", maxVisits=5)))
        answer = out.get(timeout=30)
    finally:
        engine.finish()
    assert answer["id"] == "x" and answer["turnNumber"] == 0
    assert answer["isDuringSearch"] is False
    assert answer["error"].startswith(f"search service unavailable ({target}")


def test_cli_registers_analysis_engine() -> None:
    parser, commands = cli.build_parser()
    assert "analysis-engine" in commands
    args = parser.parse_args(["analysis-engine", "--target", "h:1", "--visits", "32",
                              "--threads", "3", "--report-winrates-as", "sidetomove"])
    assert (args.target, args.visits, args.threads) == ("h:1", 32, 3)
    assert args.report_winrates_as == "sidetomove" and not args.quit_without_waiting


# --------------------------------------------------------------------------- with real Triton


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.triton_fixtures import go_service_target

    yield from go_service_target(tmp_path_factory.mktemp("katago-analysis-triton"))


class EnginePipe(ServicePipe):
    """`movepred analysis-engine` as a tool runs it: a subprocess fed one line at a time."""

    def __init__(self, target: str, *extra: str) -> None:
        super().__init__("services.cli", "analysis-engine", "--target", target, *extra)

    def send(self, *queries: dict | str) -> None:
        super().send(*(q if isinstance(q, str) else json.dumps(q) for q in queries))

    def get(self, timeout: float = 120.0) -> dict:
        line = self.raw_line(timeout)
        assert line.endswith("\n") and "\n" not in line[:-1]  # one JSON object a line
        return json.loads(line)


VERTEX_19 = {f"{c}{r}" for c in "ABCDEFGHJKLMNOPQRST" for r in range(1, 20)} | {"pass"}


def check_move_infos(result: dict, occupied: set[str], visits: int) -> None:
    infos = result["moveInfos"]
    assert infos and [m["order"] for m in infos] == list(range(len(infos)))
    for m in infos:
        assert m["move"] in VERTEX_19 and m["move"] not in occupied
        assert m["pv"][0] == m["move"] and all(v in VERTEX_19 for v in m["pv"])
        assert 0.0 <= m["winrate"] <= 1.0 and 0.0 <= m["prior"] <= 1.0
        assert m["visits"] >= 1 and m["edgeVisits"] == m["visits"]
    root = result["rootInfo"]
    assert sum(m["visits"] for m in infos) <= root["visits"] <= visits
    assert 0.0 <= root["winrate"] <= 1.0


@pytest.mark.timeout(300)
def test_documented_queries_line_by_line(service: str) -> None:
    pipe = EnginePipe(service, "--threads", "2")
    try:
        pipe.send('{"id":"v","action":"query_version"}')
        assert pipe.get()["action"] == "query_version"
        pipe.send('{"id":"m","action":"query_models"}')
        models = pipe.get()
        assert models["id"] == "m" and models["action"] == "query_models"
        served = {m["game"]: m for m in models["models"]}
        assert set(served) == {"go", "gomoku"}
        assert served["go"]["name"] == "go_policy" and served["go"]["version"] == "1"
        # KataGo's example query (docs/Analysis_Engine.md), with a budget for a CPU test
        pipe.send({**DOC_QUERY, "maxVisits": 16})
        warning = pipe.get()
        assert warning["id"] == "foo" and warning["field"] == "rules" and "warning" in warning
        results = sorted((pipe.get() for _ in range(3)), key=lambda r: r["turnNumber"])
        assert [r["turnNumber"] for r in results] == [0, 1, 2]
        assert [r["rootInfo"]["currentPlayer"] for r in results] == ["W", "B", "W"]
        for r, occupied in zip(results, ({"Q4", "C4"}, {"Q4", "C4", "P5"},
                                         {"Q4", "C4", "P5", "P6"}), strict=True):
            assert r["id"] == "foo" and r["isDuringSearch"] is False
            check_move_infos(r, occupied, 16)
        # 9x9 with the raw policy: -1 on the stones, the pass last, the rest summing to 1
        pipe.send({"id": "p", "moves": [["B", "E5"], ["W", "C3"]], "rules": "chinese",
                   "komi": 7, "boardXSize": 9, "boardYSize": 9, "maxVisits": 8,
                   "includePolicy": True})
        policy_result = pipe.get()
        policy = policy_result["policy"]
        assert len(policy) == 82 and policy[4 * 9 + 4] == -1 and policy[6 * 9 + 2] == -1
        assert sum(p for p in policy if p >= 0) == pytest.approx(1.0, abs=1e-3)
        assert policy_result["rootInfo"]["currentPlayer"] == "B"
        # Gomoku through its rule name, 15x15, in GTP vertices (no I), no pass in the policy
        pipe.send({"id": "g", "moves": [["B", "H8"], ["W", "J9"]], "rules": "freestyle",
                   "boardXSize": 15, "boardYSize": 15, "maxVisits": 8, "includePolicy": True})
        gomoku = pipe.get()
        assert gomoku["id"] == "g" and gomoku["rootInfo"]["currentPlayer"] == "B"
        vertex_15 = {f"{c}{r}" for c in "ABCDEFGHJKLMNOP" for r in range(1, 16)}
        assert gomoku["moveInfos"] and all(
            m["move"] in vertex_15 - {"H8", "J9"} and set(m["pv"]) <= vertex_15
            for m in gomoku["moveInfos"])
        g_policy = gomoku["policy"]
        assert len(g_policy) == 226 and g_policy[-1] == -1
        assert g_policy[7 * 15 + 7] == -1 and g_policy[6 * 15 + 8] == -1  # H8, J9 (rows 8, 9)
        # an error line leaves the engine serving
        pipe.send({"id": "bad", "moves": [["B", "E5"], ["W", "E5"]], "rules": "chinese",
                   "boardXSize": 9, "boardYSize": 9})
        assert pipe.get() == {"id": "bad", "field": "moves", "error": "Illegal move 1: E5"}
        # a long search reported during the search, then terminated
        pipe.send({"id": "long", "moves": [["B", "D4"]], "rules": "chinese", "komi": 7.5,
                   "boardXSize": 19, "boardYSize": 19, "maxVisits": 100000,
                   "reportDuringSearchEvery": 0.2})
        during = pipe.get()
        assert during["id"] == "long" and during["isDuringSearch"] is True
        check_move_infos(during, {"D4"}, 100000)
        pipe.send({"id": "stop", "action": "terminate", "terminateId": "long"})
        final = None
        started = time.monotonic()
        while final is None:
            line = pipe.get(timeout=30)
            if line.get("action") == "terminate":
                assert line == {"id": "stop", "action": "terminate", "terminateId": "long"}
            elif not line["isDuringSearch"]:
                final = line
        assert time.monotonic() - started < 30  # cancelled, not searched to 100,000
        assert final["id"] == "long" and final["rootInfo"]["visits"] < 100000
        check_move_infos(final, {"D4"}, 100000)
        assert pipe.proc.stdin is not None
        pipe.proc.stdin.close()  # the end of the input: the engine finishes and exits
        assert pipe.proc.wait(60) == 0
    finally:
        pipe.close()
