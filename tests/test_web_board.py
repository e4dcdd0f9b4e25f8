"""The web board (services/web): its JSON API, and the page in real headless Chromium over real
Triton and the search service (with a bearer token).

One Triton (a scripted Gomoku policy that takes fives and blocks fours, with a value head, and
the untrained Go network) and one search service are started for the module; three web apps
run on loopback in this process: one with the right token, one with a wrong token, one pointed
at a closed port. The browser is Debian's `chromium` (/usr/bin/chromium) driven by Playwright;
without it the browser tests skip and say how to install it. Screenshots go to
runs/test-artifacts/web/ (printed).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from services.games.gomoku import renju
from services.games.registry import default_game, get_game, registered_games
from services.repository.publish import publish
from services.search.client import SearchClient, game_position
from services.search.server import build_service
from services.triton.client import PolicyClient
from services.triton.launcher import TritonServer
from services.web.app import create_app
from tests.triton_fixtures import (
    GO_MODEL_NAME,
    MODEL_NAME,
    add_go_model,
    build_tactical_policy,
    make_repository,
    require_tritonserver,
)

ROOT = Path(__file__).resolve().parents[1]
ARTEFACTS = ROOT / "runs" / "test-artifacts" / "web"
TOKEN = "web-board-test-token"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# a renju position where black's j8 is a double-three (black h8 i8 j9 j10, white elsewhere)
LABEL_FROM = 0.005  # board.js writes the heatmap's probabilities from 0.5 % up
RENJU_MOVES = ["h8", "a1", "i8", "a2", "j9", "a3", "j10", "b1"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offline_client() -> TestClient:
    """The app over a client of a port nobody listens on: everything but the service works."""
    return TestClient(create_app(SearchClient(f"127.0.0.1:{closed_port()}")))


# ---------------------------------------------------------------------------- no service
def test_games_offered_come_from_the_registry() -> None:
    with offline_client() as web:
        info = web.get("/api/info").json()
    assert [g["name"] for g in info["games"]] == [g.name for g in registered_games()]
    assert info["default_game"] == default_game().name
    for entry in info["games"]:
        game = get_game(entry["name"])
        assert entry["sizes"] == list(game.sizes)
        assert entry["rules"] == list(game.rule_names)
        assert entry["default_komi"] == game.default_komi
    assert info["token"] is False


def test_every_game_s_rules_are_warmed_up_before_the_first_board(monkeypatch) -> None:
    """The app's start-up warms up each game's rules (compiled kernels: the Capture Game's,
    Go's scans of a position with set-up stones), so no board a visitor asks for waits for
    numba."""
    from services.games.base import Game

    warmed: list[str] = []
    monkeypatch.setattr(Game, "warm_up", lambda game: warmed.append(game.name))
    web = offline_client()
    assert warmed == []
    with web:
        assert warmed == [g.name for g in registered_games()]


def test_renju_forbidden_points_and_go_captures_come_from_the_rules() -> None:
    with offline_client() as web:
        renju_state = web.post("/api/state", json={"game": "gomoku", "rule": "renju",
                                                   "moves": RENJU_MOVES}).json()
        free = web.post("/api/state", json={"game": "gomoku", "rule": "freestyle",
                                            "moves": RENJU_MOVES}).json()
        go = web.post("/api/state", json={"game": "go", "size": 9, "komi": 6.5, "moves": [
            "E4", "E5", "D5", "A1", "F5", "A2", "E6"]}).json()
    game = get_game("gomoku")
    state = game.position_from_request(game_position(game, RENJU_MOVES), "position")
    expected = renju.forbidden_points(state.board)
    assert expected  # the position has a forbidden point to show
    assert renju_state["forbidden"] == {str(p): r for p, r in expected.items()}
    assert free["forbidden"] == {}
    assert renju_state["cells"] == [int(c) for c in state.board.reshape(-1)]
    assert go["captures"] == {"black": 1, "white": 0} and go["komi"] == 6.5
    assert go["cells"][4 * 9 + 4] == 0  # E5 was taken
    assert go["to_move"] == "white" and go["columns"][8] == "J"  # no I in Go's letters


def test_a_bad_position_is_invalid_argument_naming_the_field() -> None:
    cases = [({"game": "go", "size": 9, "moves": ["D4", "D4"]}, "position.moves[1]"),
             ({"game": "gomoku", "moves": ["z99"]}, "moves[0]"),
             ({"game": "gomoku", "rule": "go"}, "rule"),
             ({"game": "gomoku", "komi": 7.5}, "komi"),
             ({"game": "go", "size": 25}, "position.board_size"),
             ({"game": "chess"}, "game")]
    with offline_client() as web:
        for board, field in cases:
            r = web.post("/api/state", json=board)
            assert r.status_code == 400, board
            assert r.json()["error"]["code"] == "INVALID_ARGUMENT"
            assert r.json()["error"]["field"] == field, r.json()


def test_hostile_requests_are_refused_with_the_field_not_a_500() -> None:
    """Inputs that once came back as 500s, empty streams or a wrong board."""
    cases = [({"game": "go", "size": 2**31}, "size"),  # past the API's int32
             ({"game": "gomoku", "moves": ["h" + "8" * 5000]}, "moves[0]"),  # int() limit
             ({"game": "go", "size": 9, "moves": ["pass"] * 1444}, "moves"),  # no room left
             ({"game": "gomoku", "moves": "h8"}, "moves")]
    with offline_client() as web:
        for board, field in cases:
            for route, body in (("/api/state", board), ("/api/genmove", {"board": board})):
                r = web.post(route, json=body)
                assert r.status_code == 400, (route, r.text[:200])  # 503: it asked the service
                error = r.json()["error"]
                assert error["code"] == "INVALID_ARGUMENT", error
                assert error["field"] in (field, f"board.{field}"), error
                assert len(r.content) < 2000  # says what is wrong, without echoing the input
        for params in ({"board": "[" * 5000}, {"board": json.dumps({"game": "gomoku"}),
                                               "every": 2**31}):
            stream = web.get("/api/analyze", params=params)
            assert stream.status_code == 200 and stream.text.startswith("event: failure\n")
            assert '"INVALID_ARGUMENT"' in stream.text
        huge = b'{"game": "go", "moves": [' + b'"pass", ' * (1 << 20) + b'"pass"]}'
        r = web.post("/api/state", content=huge, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "RESOURCE_EXHAUSTED"
        chunked = web.post("/api/state", content=iter([huge[:1 << 20]] * 9),
                           headers={"content-type": "application/json"})
        assert chunked.status_code == 413  # no Content-Length: counted as it comes
        small = web.post("/api/state", content=iter([b'{"game": "gomoku", ', b'"moves": ["h8"]}']),
                         headers={"content-type": "application/json"})
        assert small.status_code == 200 and small.json()["moves"] == ["h8"]  # handed on whole
        state = web.post("/api/state", json={"game": "go", "size": 9, "komi": 7.3}).json()
        assert state["komi"] == 7.3  # as sent, not as the API's float32 holds it


def test_sgf_saved_loads_back_into_its_game() -> None:
    boards = [{"game": "gomoku", "size": 15, "rule": "renju", "komi": None,
               "moves": RENJU_MOVES},
              {"game": "go", "size": 9, "rule": "", "komi": 6.5,
               "moves": ["E4", "E5", "pass", "D5"]},
              # GM[1] as Go, but on a board Go is not served on: the game that takes it
              {"game": "capture", "size": 5, "rule": "", "komi": None, "moves": ["b1", "b2"]}]
    with offline_client() as web:
        for board in boards:
            saved = web.post("/api/sgf/save", json=board).json()
            # the page's game is another one: the file's GM decides
            other = next(g.name for g in registered_games() if g.name != board["game"])
            loaded = web.post("/api/sgf/load", json={"text": saved["text"], "game": other})
            assert loaded.status_code == 200, loaded.json()
            assert loaded.json()["board"] == board
        bad = web.post("/api/sgf/load", json={"text": "(;GM[1]SZ[9];B[ee];B[dd])", "game": "go"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "sgf"
        assert "alternate" in bad.json()["error"]["message"]
        # a board no GM[1] game is played on: the objection, not an IndexError naming moves
        for size, text in ((20, "(;GM[4]SZ[20];B[ta])"), (25, "(;GM[1]SZ[25];B[ya])")):
            r = web.post("/api/sgf/load", json={"text": text, "game": "go"})
            assert r.status_code == 400, r.text
            assert f"the file's board is {size}x{size}" in r.json()["error"]["message"]
        # a komi Go refuses is the file's fault: not a reason to show it as another game
        r = web.post("/api/sgf/load", json={"text": "(;GM[1]SZ[9]KM[-90];B[ee])", "game": "go"})
        assert r.status_code == 400 and r.json()["error"]["field"].endswith("komi"), r.text


def test_service_down_is_unavailable_with_what_to_do() -> None:
    with offline_client() as web:
        r = web.post("/api/predict", json={"game": "gomoku", "moves": ["h8"]})
        stream = web.get("/api/analyze", params={"board": json.dumps({"game": "gomoku"})})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "UNAVAILABLE"
    assert "make serve" in r.json()["error"]["hint"]
    assert stream.text.startswith("event: failure\n")
    assert '"UNAVAILABLE"' in stream.text


# ---------------------------------------------------------------------------- live stack
class WebServer:
    """A web app served by uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, client: SearchClient) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        config = uvicorn.Config(create_app(client), log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> WebServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the web app did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.socket.close()


@dataclass
class Stack:
    target: str  # the search service (token: TOKEN)
    url: str  # the web board with the right token
    wrong_token_url: str
    service_down_url: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_tritonserver()
    root = tmp_path_factory.mktemp("web-triton")
    repository = make_repository(root)  # a Gomoku policy that sees threats, with a value head
    publish(build_tactical_policy(root / "tactical.pt"), repository, MODEL_NAME)
    add_go_model(repository)
    triton = TritonServer(repository, models=(MODEL_NAME, GO_MODEL_NAME),
                          log_path=root / "tritonserver.log", startup_timeout_s=120)
    with triton:
        gomoku = PolicyClient(triton.grpc_url, "gomoku_policy", timeout_s=30.0)
        go = PolicyClient(triton.grpc_url, "go_policy", timeout_s=30.0)
        service = build_service(gomoku, go_evaluator=go, token=TOKEN).start()
        target = f"127.0.0.1:{service.port}"
        try:
            with SearchClient(target, token=TOKEN, wait_for_ready=True) as client:
                client.predict(["h8"], timeout=60)  # the model answers through the service
            with (WebServer(SearchClient(target, token=TOKEN)) as good,
                  WebServer(SearchClient(target, token="not-the-token")) as wrong,
                  WebServer(SearchClient(f"127.0.0.1:{closed_port()}")) as down):
                yield Stack(target, good.url, wrong.url, down.url)
        finally:
            service.stop()
            gomoku.close()
            go.close()


def status(url: str) -> dict[str, int]:
    return httpx.get(f"{url}/api/status", timeout=10).json()


def wait_for(check: Any, timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.1)


def test_api_predict_is_the_services_policy_and_model(stack: Stack) -> None:
    moves = ["h8", "h9", "i8"]
    r = httpx.post(f"{stack.url}/api/predict", json={"game": "gomoku", "moves": moves},
                   timeout=30).json()
    with SearchClient(stack.target, token=TOKEN) as client:
        direct = client.predict(moves, top_k=10)
    assert r["model"] == {"name": direct.model_name, "version": direct.model_version}
    assert r["model"]["name"] == "gomoku_policy"
    assert r["policy"] == pytest.approx(list(direct.policy), abs=1e-7)
    assert [m["name"] for m in r["top"]] == [m.name for m in direct.top_moves]
    wrong = httpx.post(f"{stack.wrong_token_url}/api/predict",
                       json={"game": "gomoku", "moves": moves}, timeout=30)
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "UNAUTHENTICATED"
    assert "--token-file" in wrong.json()["error"]["hint"]


def test_api_genmove_answers_a_legal_move_and_the_new_board(stack: Stack) -> None:
    board = {"game": "go", "size": 9, "komi": 7.5, "moves": ["E5"]}
    r = httpx.post(f"{stack.url}/api/genmove", json={"board": board, "visits": 32},
                   timeout=120).json()
    assert r["model"]["name"] == "go_policy" and r["color"] == "white"
    assert r["state"]["moves"] == ["E5", r["move"]["name"]]
    assert r["total_visits"] >= 32 and r["candidates"]


def test_api_analysis_streams_and_closing_it_cancels_the_search(stack: Stack) -> None:
    before = status(stack.url)
    board = json.dumps({"game": "gomoku", "moves": ["h8"]})
    reports = []
    with httpx.stream("GET", f"{stack.url}/api/analyze", timeout=60,
                      params={"board": board, "visits": 100000, "every": 20}) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                reports.append(json.loads(line[6:]))
            if len(reports) == 3:
                break
    assert [r["total_visits"] for r in reports] == sorted(r["total_visits"] for r in reports)
    assert reports[-1]["total_visits"] > reports[0]["total_visits"] > 0
    assert reports[0]["candidates"][0]["pv"] and reports[0]["model"]["name"] == "gomoku_policy"
    after = wait_for(lambda: (s := status(stack.url))["analyses_running"] == 0 and s,
                     what="the analysis to end")
    assert after["analyses_started"] == before["analyses_started"] + 1
    assert after["analyses_cancelled"] == before["analyses_cancelled"] + 1
    # a search that runs to its budget ends with a final report and no cancel
    with httpx.stream("GET", f"{stack.url}/api/analyze", timeout=60,
                      params={"board": board, "visits": 40, "every": 20}) as response:
        events = [line for line in response.iter_lines() if line.startswith("event: ")]
    assert events[-1] == "event: done" and "event: report" in events
    assert status(stack.url)["analyses_cancelled"] == after["analyses_cancelled"]


# ---------------------------------------------------------------------------- the browser
@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A headless Chromium context (a fresh profile): Debian's browser, never a download."""
    if not CHROMIUM.exists():
        pytest.skip(f"no {CHROMIUM}: install Debian's chromium package "
                    "(apt-get install chromium; .ci/run does so as root)")
    sync_api = pytest.importorskip("playwright.sync_api")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1120, "height": 720})
        try:
            yield context
        finally:
            context.close()


def open_board(browser: Any, url: str) -> Any:
    page = browser.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")
    return page


def screenshot(page: Any, name: str) -> Path:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / name
    page.screenshot(path=str(path))
    print(f"screenshot: {path}")
    return path


def point(name: str, game: str = "gomoku", size: int = 15) -> int:
    g = get_game(game)
    return g.parse_move(name, size)


def click(page: Any, index: int) -> None:
    page.click(f"circle.hit[data-point='{index}']")


def stones(page: Any) -> int:
    return page.locator("circle.stone").count()


def wait_moves(page: Any, n: int) -> None:
    """Until the page's move list has `n` moves."""
    page.wait_for_function("document.querySelector('#moves').textContent.split(' ')"
                           f".filter(Boolean).length === {n}")


def test_browser_plays_gomoku_and_shows_the_policy_heatmap(stack: Stack, browser: Any) -> None:
    page = open_board(browser, stack.url)
    assert page.locator("#model").inner_text() == "gomoku_policy v1"
    assert page.locator("circle.hit").count() == 225
    page.fill("#budget", "40")
    click(page, point("h8"))
    page.wait_for_function("document.querySelectorAll('circle.stone').length === 2")
    assert page.locator("circle.stone.white").count() == 1  # the engine answered as white
    moves = page.locator("#moves").inner_text().split()
    assert moves[0] == "1.h8" and len(moves) == 2
    assert page.locator("#status").inner_text().startswith("black to move")

    page.click("#undo")  # takes back the engine's answer and the player's move
    page.wait_for_function("document.querySelectorAll('circle.stone').length === 0")

    page.select_option("#engine", "none")  # black's open three, white to move
    moves = ["h8", "h9", "i8", "i9", "j8"]
    for n, name in enumerate(moves, 1):
        click(page, point(name))
        page.wait_for_function(f"document.querySelectorAll('circle.stone').length === {n}")
    page.check("#heatmap")
    page.wait_for_selector("text.heat-label")
    shown = {int(e.get_attribute("data-point")): float(e.get_attribute("data-p"))
             for e in page.locator("text.heat-label").all()}
    with SearchClient(stack.target, token=TOKEN) as client:
        direct = client.predict(moves, top_k=1)
    expected = {i: p for i, p in enumerate(direct.policy) if p >= LABEL_FROM}
    assert shown.keys() == expected.keys()
    assert all(abs(shown[i] - p) < 1e-6 for i, p in expected.items())
    best = max(expected, key=expected.get)
    label = page.locator(f"text.heat-label[data-point='{best}']").text_content()
    assert float(label) == pytest.approx(100 * expected[best], abs=0.51)
    screenshot(page, "web-heatmap.png")
    page.close()


def test_browser_live_analysis_updates_and_is_cancelled(stack: Stack, browser: Any) -> None:
    page = open_board(browser, stack.url)
    page.select_option("#engine", "none")
    for n, name in enumerate(("h8", "h9", "i8", "i9", "j8"), 1):
        click(page, point(name))
        page.wait_for_function(f"document.querySelectorAll('circle.stone').length === {n}")
    before = status(stack.url)
    page.check("#analyze")
    summary = page.locator("#analysis-summary")
    summary.wait_for()
    first = int(summary.get_attribute("data-visits"))
    page.wait_for_function(f"Number(document.querySelector('#analysis-summary')"
                           f".dataset.visits) > {first}")  # updated as it streams
    assert page.locator("#analysis tr.candidate").count() >= 2
    assert page.locator("circle.cand.best").count() == 1
    screenshot(page, "web-analysis.png")

    click(page, point("g8"))  # the position changes: that search is cancelled, a new one runs
    wait_for(lambda: status(stack.url)["analyses_cancelled"] >= before["analyses_cancelled"] + 1,
             what="the first analysis to be cancelled")
    page.wait_for_function("document.querySelector('#analysis-summary') && "
                           "Number(document.querySelector('#analysis-summary').dataset.visits) > 0")
    page.uncheck("#analyze")  # and switching it off cancels the second
    after = wait_for(lambda: (s := status(stack.url))["analyses_running"] == 0 and s,
                     what="every analysis to stop")
    assert after["analyses_started"] == before["analyses_started"] + 2
    assert after["analyses_cancelled"] == before["analyses_cancelled"] + 2
    assert page.locator("circle.cand").count() == 0
    assert page.locator("#error").is_hidden()
    page.close()


def test_browser_go_9x9_captures_komi_pass_and_sgf(stack: Stack, browser: Any,
                                                    tmp_path: Path) -> None:
    page = open_board(browser, stack.url)
    page.select_option("#engine", "none")
    page.select_option("#game", "go")
    page.select_option("#size", "9")
    page.wait_for_function("document.querySelectorAll('circle.hit').length === 81")
    assert page.locator("#komi").input_value() == "7.5"
    moves = ["E4", "E5", "D5", "A1", "F5", "A2", "E6"]  # black captures E5
    for n, name in enumerate(moves, 1):
        click(page, point(name, "go", 9))
        wait_moves(page, n)
    assert "captures: black 1, white 0" in page.locator("#notes").inner_text()
    assert "komi 7.5" in page.locator("#notes").inner_text()
    assert page.locator("#model").inner_text() == "go_policy v1"
    page.fill("#budget", "40")
    page.click("#engine-move")
    wait_moves(page, 8)
    with page.expect_download() as download:
        page.click("#save")
    saved = tmp_path / "game.sgf"
    download.value.save_as(saved)
    assert "GM[1]" in saved.read_text() and "SZ[9]" in saved.read_text()
    page.click("#pass")
    page.wait_for_function("document.querySelector('#moves').textContent.endsWith('pass')")
    page.set_input_files("#load", str(saved))  # back to the saved game
    wait_moves(page, 8)
    engine_passed = page.locator("#moves").inner_text().endswith("pass")
    assert stones(page) == 6 + (not engine_passed)  # 7 moves, one stone captured, the engine's
    screenshot(page, "web-go-9x9.png")
    page.close()


def test_browser_marks_renju_forbidden_points(stack: Stack, browser: Any) -> None:
    page = open_board(browser, stack.url)
    page.select_option("#engine", "none")
    page.select_option("#rule", "renju")
    # the new renju board is fetched first; a click before it would play on the old board
    page.wait_for_function("document.body.dataset.pending === undefined")
    for n, name in enumerate(RENJU_MOVES, 1):
        click(page, point(name))
        page.wait_for_function(f"document.querySelectorAll('circle.stone').length === {n}")
    forbidden = page.locator("g.forbidden")
    assert forbidden.count() == 1
    assert forbidden.get_attribute("data-point") == str(point("j8"))
    click(page, point("j8"))  # black may not play it: the page says why, the board stays
    page.wait_for_selector("#error:not([hidden])")
    assert "double-three" in page.locator("#error").inner_text()
    assert stones(page) == len(RENJU_MOVES)
    page.close()


@pytest.mark.parametrize("which, code", [("wrong_token_url", "UNAUTHENTICATED"),
                                         ("service_down_url", "UNAVAILABLE")])
def test_browser_shows_service_errors_on_a_drawn_board(stack: Stack, browser: Any, which: str,
                                                       code: str) -> None:
    page = open_board(browser, getattr(stack, which))
    page.wait_for_selector("#error:not([hidden])")
    assert page.locator("#error").inner_text().startswith(f"{code}: ")
    assert page.locator("circle.hit").count() == 225  # the board is drawn all the same
    assert page.locator("#model").inner_text() == "unavailable"
    screenshot(page, f"web-error-{code.lower()}.png")
    page.close()

