"""Go's tactical channels (services/games/go/tactics.py) and the extended encoder built on them.

Fixtures are drawn top row first ('X' Black, 'O' White, '.' empty) with Black to move unless
said otherwise, and points named with GTP coordinates (row 1 at the bottom, no letter I). The
counts and sensibleness are checked against `GoState.play` on random positions, the ladders
against an independent recursive reader written here, and every channel against the 8
symmetries.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from services.games.go.encoders import EXTENDED_CHANNELS, N_EXTENDED_PLANES
from services.games.go.extended_planes import planes_torch
from services.games.go.features import compact
from services.games.go.game import GO, GoSearchState, own_eyes
from services.games.go.rules import BLACK, WHITE, GoState, IllegalMove, neighbours, opponent
from services.games.go.tactics import (
    CAPTURE_SIZE,
    LADDER_CAPTURE,
    LADDER_ESCAPE,
    LIBERTIES_AFTER,
    SELF_ATARI_SIZE,
    SENSIBLE,
    TACTICAL_CHANNELS,
    tactical_planes,
)
from services.games.symmetry import N_SYMMETRIES, transform_board
from services.models.configs import build, spec
from services.models.export import export_torchscript

GTP = "ABCDEFGHJKLMNOPQRST"


def pt(name: str, size: int = 9) -> int:
    """GTP name ('C3') -> flat index y * size + x."""
    return (int(name[1:]) - 1) * size + GTP.index(name[0].upper())


def tactics(state: GoState) -> np.ndarray:
    """int8 [TACTICAL_CHANNELS, S*S] of `state` seen from its side to move."""
    return tactical_planes(compact(state)[None])[0].reshape(TACTICAL_CHANNELS, -1)


def board(text: str, to_move: int = BLACK) -> GoState:
    return GoState.from_ascii(text, to_move=to_move)


# ---- captures, self-atari, liberties ---------------------------------------------------------
CAPTURE_ONE = """
    . . . . . . . . .
    . . . . . . . . .
    . . . . . . . . .
    . . . . X . . . .
    . . . X O . . . .
    . . . . X . . . .
    . . . . . . . . .
    . . . . . . . . .
    . . . . . . . . .
"""


def test_capturing_one_stone() -> None:
    t = tactics(board(CAPTURE_ONE))
    assert t[CAPTURE_SIZE, pt("F5")] == 1
    assert t[LIBERTIES_AFTER, pt("F5")] == 4  # F6, G5, F4 and the captured E5
    assert t[SELF_ATARI_SIZE, pt("F5")] == 0
    assert t[CAPTURE_SIZE].sum() == 1  # nowhere else
    # seen from White, E5's extension at F5 captures nothing and has 3 liberties
    w = tactics(board(CAPTURE_ONE, to_move=WHITE))
    assert w[CAPTURE_SIZE, pt("F5")] == 0
    assert w[LIBERTIES_AFTER, pt("F5")] == 3


def test_capturing_two_groups_counts_every_stone() -> None:
    # E4 takes the three stones C5-E5 and the one on E3 at once
    state = board("""
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . X X X . . . .
        . X O O O X . . .
        . . X X . X . . .
        . . . X O X . . .
        . . . . X . . . .
        . . . . . . . . .
    """)
    t = tactics(state)
    assert t[CAPTURE_SIZE, pt("E4")] == 4
    after = state.play(pt("E4"))
    assert after.captures[BLACK] == 4
    assert t[LIBERTIES_AFTER, pt("E4")] == min(after.liberties().reshape(-1)[pt("E4")], 7)


def test_capture_size_is_capped_at_seven() -> None:
    # a column of nine white stones on the first line, in atari at J2... captured by A2
    t = tactics(board("""
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . X X X X X X X X
        O O O O O O O O O
    """))
    assert t[CAPTURE_SIZE, pt("A2")] == 7


def test_self_atari_size_and_liberties_after_the_move() -> None:
    state = board("""
        . . . . . . . . .
        . . . . . . . . .
        . . . . O . . . .
        . . . O . O . . .
        . . . . . . . . .
        . . . . . . . . .
        O . . . . X . . .
        X O . . . . . . .
        . . . . . . . . .
    """)
    t = tactics(state)
    assert t[SELF_ATARI_SIZE, pt("E6")] == 1  # into White's mouth: E5 is its one liberty
    assert t[LIBERTIES_AFTER, pt("E6")] == 1
    assert t[SELF_ATARI_SIZE, pt("A1")] == 2  # A2 in atari extends to A1: B1 is left
    assert t[LIBERTIES_AFTER, pt("A1")] == 1
    assert t[SELF_ATARI_SIZE, pt("B1")] == 0
    assert t[LIBERTIES_AFTER, pt("B1")] == 2  # A1 and C1 (B2 is White's)
    assert t[LIBERTIES_AFTER, pt("G3")] == 6  # joins F3: E3, F2, F4, G2, G4, H3
    assert t[LIBERTIES_AFTER, pt("J9")] == 2  # a corner
    assert t[LIBERTIES_AFTER, pt("E1")] == 3  # an edge
    assert t[LIBERTIES_AFTER, pt("F3")] == 0  # occupied
    assert t[SELF_ATARI_SIZE].sum() == 3  # E6 and A1 only


# ---- ladders ---------------------------------------------------------------------------------
LADDER = """
    . . . . . . . . .
    . . . . . . . . .
    . . . . . . {b} . .
    . . . . . . . . .
    . . . . . . . . .
    . . . . . . . . .
    . X O . . . . . .
    . . X X . . . . .
    . . . . . . . . .
"""


def test_a_ladder_captures_and_a_breaker_stops_it() -> None:
    works = tactics(board(LADDER.format(b=".")))
    assert works[LADDER_CAPTURE, pt("C4")] == 1  # White runs to D3, D4, E4, ... the corner
    assert works[LADDER_CAPTURE, pt("D3")] == 0  # from this side C4, C5 gives it 3 liberties
    assert works[LADDER_CAPTURE].sum() == 1
    broken = tactics(board(LADDER.format(b="O")))  # a white stone on G7, in the ladder's way
    assert broken[LADDER_CAPTURE, pt("C4")] == 0
    assert broken[LADDER_CAPTURE].sum() == 0
    assert broken[CAPTURE_SIZE].sum() == 0 and broken[SENSIBLE, pt("C4")] == 1


def test_a_ladder_across_the_19x19_board() -> None:
    b = np.zeros((19, 19), np.int8)
    b[2, 2] = WHITE  # C3, with Black on B3, C2 and D2: the ladder runs to the far corner
    b[2, 1] = b[1, 2] = b[1, 3] = BLACK
    assert tactics(GoState.from_board(b, BLACK))[LADDER_CAPTURE, pt("C4", 19)] == 1
    b[15, 16] = WHITE  # R16, on its path
    assert tactics(GoState.from_board(b, BLACK))[LADDER_CAPTURE, pt("C4", 19)] == 0


def test_a_group_in_atari_escapes_only_with_a_breaker() -> None:
    prey = """
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . {b} . .
        . . . . . . . . .
        . . . . . . . . .
        . . O . . . . . .
        . O X . . . . . .
        . . O O . . . . .
        . . . . . . . . .
    """
    caught = tactics(board(prey.format(b=".")))
    assert caught[LADDER_ESCAPE, pt("D3")] == 0  # D3 has two liberties: the chase catches it
    assert caught[SELF_ATARI_SIZE, pt("D3")] == 0
    assert caught[LADDER_ESCAPE].sum() == 0
    saved = tactics(board(prey.format(b="X")))  # Black's G7 breaks the ladder
    assert saved[LADDER_ESCAPE, pt("D3")] == 1
    assert saved[LADDER_ESCAPE].sum() == 1


def test_a_prey_that_captures_a_chaser_escapes() -> None:
    # the ladder of LADDER, but once White extends to D3, Black's C2-D2 is in atari: White
    # takes it at B2 and is out
    t = tactics(board("""
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . X O . . . . . .
        . . X X O . . . .
        . . O O . . . . .
    """))
    assert t[LADDER_CAPTURE, pt("C4")] == 0
    assert t[LADDER_CAPTURE].sum() == 0


# ---- sensibleness, ko ------------------------------------------------------------------------
def test_own_eye_is_not_sensible_but_a_false_eye_is() -> None:
    eye = """
        . . . . . . . O .
        . . . . . . . . O
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        . . . . . . . . .
        X {d} . . . . . . .
        . X . . . . . . .
    """
    real = tactics(board(eye.format(d="X")))
    assert real[SENSIBLE, pt("A1")] == 0  # Black's own eye: legal, never sensible
    assert real[LIBERTIES_AFTER, pt("A1")] > 0  # (legal)
    false = tactics(board(eye.format(d="O")))  # White on the diagonal B2: a false eye
    assert false[SENSIBLE, pt("A1")] == 1
    # White's eye at J9 is suicide for Black: illegal, every channel 0
    assert (real[:, pt("J9")] == 0).all()
    assert real[SENSIBLE, pt("C5")] == 1
    assert real[SENSIBLE, pt("A2")] == 0  # occupied


def test_the_ko_point_is_illegal_in_every_channel() -> None:
    s = GoState(9)
    for v in ("D4", "E4", "C5", "F5", "D6", "E6", "A1", "D5", "E5"):
        s = s.play(pt(v))
    assert s.ko == pt("D5") and s.to_move == WHITE
    c = compact(s)
    t = tactical_planes(c[None])[0].reshape(TACTICAL_CHANNELS, -1)
    assert (t[:, pt("D5")] == 0).all()
    c[3] = 0  # without the ko, D5 would take E5 back
    free = tactical_planes(c[None])[0].reshape(TACTICAL_CHANNELS, -1)
    assert free[CAPTURE_SIZE, pt("D5")] == 1 and free[SENSIBLE, pt("D5")] == 1


# ---- against references, on random positions ------------------------------------------------
def random_positions(size: int, count: int, seed: int) -> list[GoState]:
    """Positions of random games that do not fill own eyes, 20 to 90 % of the way to a full
    board, either side to move."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        pos = GoSearchState(GoState(size))
        for _ in range(int(rng.integers(size * size // 5, size * size * 9 // 10))):
            moves = pos.search_candidates()
            move = int(rng.choice(moves))
            if move == pos.pass_move and len(moves) > 1:
                move = int(rng.choice(moves[:-1]))
            pos = pos.play(move)
            if pos.is_over:
                break
        if not pos.is_over:
            out.append(pos.state)
    return out


def _group(cells: list[int], p: int, nbrs) -> tuple[set[int], set[int]]:
    colour, stones, libs, todo = cells[p], {p}, set(), [p]
    while todo:
        for q in nbrs[todo.pop()]:
            if cells[q] == 0:
                libs.add(q)
            elif cells[q] == colour and q not in stones:
                stones.add(q)
                todo.append(q)
    return stones, libs


def _play(cells: list[int], p: int, colour: int, nbrs) -> tuple[list[int] | None, int]:
    """(the board after `colour` plays `p`, captures made, or None for suicide; the point the
    opponent may not retake at once, -1 for none: GoState's simple ko)."""
    after = list(cells)
    after[p] = colour
    taken: list[int] = []
    for q in nbrs[p]:
        if after[q] == opponent(colour):
            stones, libs = _group(after, q, nbrs)
            if not libs:
                for s in stones:
                    after[s] = 0
                taken += stones
    libs = _group(after, p, nbrs)[1]
    if not libs:
        return None, -1
    alone = all(after[q] != colour for q in nbrs[p])
    return after, taken[0] if len(taken) == 1 and alone and len(libs) == 1 else -1


def _prey_escapes(cells, prey, nbrs, ko, depth=0) -> bool | None:
    """The prey (in atari, to move) gets out: True, False, or None past the depth bound."""
    if depth > 60:
        return None
    colour = cells[prey]
    stones, libs = _group(cells, prey, nbrs)
    tries = set(libs)
    for s in stones:
        for q in nbrs[s]:
            if cells[q] == opponent(colour):
                hunter_libs = _group(cells, q, nbrs)[1]
                if len(hunter_libs) == 1:
                    tries |= hunter_libs
    unknown = False
    for m in sorted(tries - {ko}):
        after, made = _play(cells, m, colour, nbrs)
        if after is None:
            continue
        n = len(_group(after, prey, nbrs)[1])
        if n >= 3:
            return True
        if n == 2:
            r = _chase_fails(after, prey, nbrs, made, depth + 1)
            if r:
                return True
            unknown |= r is None
    return None if unknown else False


def _chase_fails(cells, prey, nbrs, ko, depth) -> bool | None:
    """The hunter to move cannot catch the prey (two liberties) with an atari."""
    unknown = False
    for a in sorted(_group(cells, prey, nbrs)[1] - {ko}):
        after, made = _play(cells, a, opponent(cells[prey]), nbrs)
        if after is None:
            continue
        r = _prey_escapes(after, prey, nbrs, made, depth + 1)
        if r is False:
            return False
        unknown |= r is None
    return None if unknown else True


def reference(state: GoState) -> tuple[np.ndarray, np.ndarray]:
    """(int8 [6, S*S] by `GoState.play` and the readers above, bool [S*S] where the ladder
    channels are known: the reference read finished)."""
    size, me = state.size, state.to_move
    n = size * size
    nbrs = neighbours(size)
    cells = list(state.cells)
    out = np.zeros((TACTICAL_CHANNELS, n), np.int8)
    known = np.ones(n, bool)
    eyes = set(own_eyes(state, me).tolist())
    for p in range(n):
        try:
            after = state.play(p)
        except IllegalMove:
            continue
        captured = sum(v == opponent(me) for v in state.cells) - \
            sum(v == opponent(me) for v in after.cells)
        libs = int(after.liberties().reshape(-1)[p])
        out[CAPTURE_SIZE, p] = min(captured, 7)
        out[LIBERTIES_AFTER, p] = min(libs, 7)
        if libs == 1:
            out[SELF_ATARI_SIZE, p] = min(len(_group(list(after.cells), p, nbrs)[0]), 7)
        out[SENSIBLE, p] = p not in eyes
        moved, made = _play(cells, p, me, nbrs)
        for q in nbrs[p]:
            if cells[q] == opponent(me) and len(_group(cells, q, nbrs)[1]) == 2:
                r = _prey_escapes(moved, q, nbrs, made)
                known[p] &= r is not None
                if r is False:
                    out[LADDER_CAPTURE, p] = 1
            if cells[q] == me and len(_group(cells, q, nbrs)[1]) == 1:
                n_after = len(_group(moved, p, nbrs)[1])
                r = True if n_after >= 3 else _chase_fails(moved, p, nbrs, made, 0) \
                    if n_after == 2 else False
                known[p] &= r is not None
                if r:
                    out[LADDER_ESCAPE, p] = 1
    return out, known


@pytest.mark.parametrize(("size", "seed"), [(9, 1), (9, 2), (13, 3), (19, 4)])
def test_every_channel_matches_the_references_on_random_positions(size: int, seed: int) -> None:
    states = random_positions(size, 30 if size < 19 else 8, seed)
    got = tactical_planes(np.stack([compact(s) for s in states]))
    ladders = 0
    for state, planes in zip(states, got, strict=True):
        want, known = reference(state)
        planes = planes.reshape(TACTICAL_CHANNELS, -1)
        assert known.all()
        assert np.array_equal(planes, want), state.ascii()
        legal = state.legal_mask()
        assert np.array_equal(planes[LIBERTIES_AFTER] > 0, legal)  # 0 exactly where illegal
        ladders += int(want[LADDER_CAPTURE].sum() + want[LADDER_ESCAPE].sum())
    assert ladders > 0  # the positions exercise the readers


def test_every_channel_transforms_with_the_board() -> None:
    states = [*random_positions(9, 6, 4), board(LADDER.format(b=".")),
              board(LADDER.format(b="O"))]
    boards = np.stack([compact(s) for s in states])
    planes = tactical_planes(boards)
    assert planes[:, LADDER_CAPTURE].any() and planes[:, SELF_ATARI_SIZE].any()
    for k in range(N_SYMMETRIES):
        moved = np.ascontiguousarray(transform_board(boards, k))
        assert np.array_equal(tactical_planes(moved), transform_board(planes, k)), k


# ---- the extended encoder and its networks ----------------------------------------------------
def test_the_go_game_names_its_encoders() -> None:
    state = random_positions(9, 1, 5)[0]
    basic, extended = GO.encoders["basic"], GO.encoders["extended"]
    assert np.array_equal(basic.compact(state), compact(state))
    assert np.array_equal(basic.compact(state), GO.network_input(GoSearchState(state)))
    x = extended.compact(state)
    assert x.shape == extended.input_shape(9) == (EXTENDED_CHANNELS, 9, 9)
    assert np.array_equal(x[:4], compact(state))
    assert np.array_equal(x[4:], tactical_planes(compact(state)[None])[0])
    assert x.max() <= extended.max_value
    assert (basic.channels, basic.planes) == (4, 17)
    assert (extended.channels, extended.planes) == (EXTENDED_CHANNELS, N_EXTENDED_PLANES)
    assert np.array_equal(GO.random_inputs(3, 9, seed=2), GO.random_inputs(3, 9, seed=2,
                                                                            encoder="basic"))


def test_the_torch_expansion_is_one_hot() -> None:
    states = [*random_positions(9, 4, 6), board(CAPTURE_ONE)]
    x = torch.from_numpy(np.stack([GO.encoders["extended"].compact(s) for s in states]))
    planes = planes_torch(x)
    assert planes.shape == (len(states), N_EXTENDED_PLANES, 9, 9)
    assert planes.dtype == torch.float32
    assert torch.equal(GO.encoders["extended"].planes_torch(x), planes)
    assert torch.equal(planes[:, :17], GO.expand_planes(x[:, :4]))  # the basic planes first
    for i in range(3):  # the three counts: exactly one of 0..7 on every point
        block = planes[:, 17 + 8 * i: 25 + 8 * i]
        assert torch.equal(block.sum(1), torch.ones(len(states), 9, 9))
        assert torch.equal(block.argmax(1), x[:, 4 + i].long())
    assert torch.equal(planes[:, 41:44], x[:, 7:10].float())
    assert torch.equal(torch.jit.script(planes_torch)(x), planes)


@pytest.mark.parametrize("name", ["go_res_b2c32_x", "go_res_b2c32_x_v", "go_res_b6c96_x"])
def test_extended_configs_build_script_and_run(name: str, tmp_path: Path) -> None:
    assert spec(name).game == GO.name and spec(name).encoder == "extended"
    model = build(name).eval()
    if name == "go_res_b6c96_x":  # builds and runs; scripting is the small ones' check
        with torch.no_grad():
            out = model(torch.from_numpy(GO.random_inputs(2, 9, encoder="extended")))
        assert out.shape == (2, 82)
        return
    path = tmp_path / "model.pt"
    diff = export_torchscript(model, path, board_size=9, n_check=8, game=GO.name,
                              n_moves=82, inputs=GO.random_inputs(8, 9, encoder="extended"))
    assert diff <= 1e-4
    loaded = torch.jit.load(str(path))
    for size in (9, 19):
        x = torch.from_numpy(GO.encoders["extended"].compact_batch(
            np.stack([compact(s) for s in random_positions(size, 2, size)])))
        with torch.no_grad():
            out, want = loaded(x), model(x)
        logits = out[0] if spec(name).value else out
        assert logits.shape == (2, size * size + 1)
        assert torch.allclose(logits, want[0] if spec(name).value else want, atol=1e-4)
        if spec(name).value:
            assert out[1].shape == (2,)


def test_the_basic_configs_keep_the_basic_input() -> None:
    assert spec("go_res_b2c32").encoder == spec("go_res_b2c32_v").encoder == "basic"
