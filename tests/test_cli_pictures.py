"""`movepred predict/analyze --png` and Go from the CLI (`--game go --size N`), against a real
Triton (the tiny Gomoku policy and the small Go network) and a real search service in-process.

The pictures are checked where they could be wrong: their size, a stone where a stone was
played, and the heat: the colour at the point the policy (or the search) likes best differs
from that of a point it likes least (or did not visit: plain board)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from services import cli
from services.board_image import BOARD_COLOUR, PNG_PX, point_pixel
from services.coords import parse_point
from services.games.go.game import parse_vertex
from services.search.client import SearchClient, game_position

BOARD_RGB = tuple(int(BOARD_COLOUR[i:i + 2], 16) for i in (1, 3, 5))


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.triton_fixtures import go_service_target

    yield from go_service_target(tmp_path_factory.mktemp("pictures-triton"))


def rgb(pixels: np.ndarray, x: int, y: int, size: int, dx: float = 0.3,
        dy: float = 0.3) -> tuple[int, ...]:
    """The colour drawn at point (x, y), off its centre (the lines and numbers pass there)."""
    col, row = point_pixel(x, y, size, dx, dy)
    return tuple(int(v * 255 + 0.5) for v in pixels[row, col, :3])


def read_png(path: Path) -> np.ndarray:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(path)
    assert pixels.shape[:2] == (PNG_PX, PNG_PX)
    return pixels


@pytest.mark.timeout(300)
def test_predict_png_shows_the_policy_and_the_stones(target: str, tmp_path: Path) -> None:
    moves = ["h8", "h9", "i8"]
    out = tmp_path / "heat.png"
    assert cli.main(["predict", "--target", target, "--png", str(out), *moves]) == 0
    pixels = read_png(out)
    with SearchClient(target) as client:
        policy = np.array(client.predict(moves, top_k=1).policy)
    empty = [p for p in range(225) if p not in {y * 15 + x for x, y in
                                                  (parse_point(m, 15) for m in moves)}]
    best = max(empty, key=lambda p: policy[p])
    worst = min(empty, key=lambda p: policy[p])
    assert policy[best] > policy[worst]
    hot, cold = rgb(pixels, best % 15, best // 15, 15), rgb(pixels, worst % 15, worst // 15, 15)
    assert hot != cold and hot[1] < cold[1]  # the heat is red: less green where it is hot
    x, y = parse_point("h8", 15)
    assert max(rgb(pixels, x, y, 15, 0.2, 0.2)) < 60  # a black stone
    x, y = parse_point("h9", 15)
    assert min(rgb(pixels, x, y, 15, 0.2, 0.2)) > 200  # a white stone


@pytest.mark.timeout(300)
def test_go_from_the_cli_on_any_size(target: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["genmove", "--target", target, "--game", "go", "--size", "19",
                     "--visits", "16", "D4", "Q16"]) == 0
    assert "black plays" in capsys.readouterr().out  # the service answered the 19x19 game
    out = tmp_path / "go9.png"
    assert cli.main(["predict", "--target", target, "--game", "go", "--size", "9", "--png",
                     str(out), "E5", "C3"]) == 0
    printed = capsys.readouterr().out
    assert " 9 . . . . . . . . ." in printed and "A B C D E F G H J" in printed
    pixels = read_png(out)
    with SearchClient(target) as client:
        policy = np.array(client.predict(game_position("go", ["E5", "C3"], 9)).policy)
    assert policy.size == 82  # 81 points and the pass
    taken = {parse_vertex(v, 9) for v in ("E5", "C3")}
    points = [p for p in range(81) if p not in taken]
    best = max(points, key=lambda p: policy[p])
    worst = min(points, key=lambda p: policy[p])
    assert rgb(pixels, best % 9, best // 9, 9) != rgb(pixels, worst % 9, worst // 9, 9)
    # analyze: the final report's visits as the heat; points the search never visited are plain
    out = tmp_path / "go13.png"
    assert cli.main(["analyze", "--target", target, "--game", "go", "--size", "13",
                     "--visits", "32", "--every", "16", "--png", str(out), "D4"]) == 0
    final_table = capsys.readouterr().out.split("final 32")[-1]
    rows = re.findall(r"│ *([A-HJ-N](?:1[0-3]|[1-9])|pass) *│ *(\d+) *│", final_table)
    visits = {name: int(n) for name, n in rows}
    assert sum(visits.values()) >= 31 and 0 in visits.values()  # every visited move listed
    pixels = read_png(out)
    top = max(visits, key=lambda name: visits[name])
    if top != "pass":
        p = parse_vertex(top, 13)
        assert rgb(pixels, p % 13, p // 13, 13) != BOARD_RGB
    visited = {parse_vertex(name, 13) for name, n in visits.items() if n and name != "pass"}
    unvisited = next(p for p in range(169) if p not in visited | {parse_vertex("D4", 13)})
    assert rgb(pixels, unvisited % 13, unvisited // 13, 13) == BOARD_RGB
    # a size the service does not serve is its INVALID_ARGUMENT, named
    assert cli.main(["predict", "--target", target, "--game", "go", "--size", "25"]) == 1
    assert "board_size" in capsys.readouterr().out


@pytest.mark.timeout(240)
def test_movepred_play_plays_go_with_itself(target: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`movepred play --game go` was refused ("self-play is Gomoku only"); the self-play loop
    now asks the Game for everything, so Go plays itself: GTP vertices, passes, GM[1]."""
    from sgfmill import sgf

    from services.games.registry import get_game

    out = tmp_path / "go.sgf"
    argv = ["play", "--target", target, "--game", "go", "--size", "9", "--visits", "2",
            "--max-moves", "24", "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr()
    assert "  1. black " in printed.out and f"wrote {out}: " in printed.out, printed
    shown = re.findall(r"^ *\d+\. (?:black|white) (\S+) ", printed.out, flags=re.MULTILINE)
    game = sgf.Sgf_game.from_string(out.read_text(encoding="utf-8"))
    root = game.get_root()
    assert root.get("GM") == 1 and root.get("SZ") == 9
    assert "go_policy v" in root.get("PB") and root.get("PB") == root.get("PW")
    go = get_game("go")
    state = go.start(9)
    for node in game.get_main_sequence()[1:]:
        colour, point = node.get_move()
        assert colour == ("b" if len(state.moves) % 2 == 0 else "w")
        state = state.play(81 if point is None else point[0] * 9 + point[1])  # legal by the rules
    # the printed moves are the record's, in GTP vertices
    assert shown == [go.move_name(m, 9) for m in state.moves]
    if state.is_over:  # two passes within 24 moves: scored
        assert root.get("RE")[:2] in ("B+", "W+") or root.get("RE") == "0"
    else:
        assert len(state.moves) == 24 and root.get("RE") == "?"
