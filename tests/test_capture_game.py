"""The Capture Game: its rules, the greedy opponent rule by rule, the batched engine against the
plain one-game reference (tests/capture_reference.py) move by move, and the registered game's
request validation and search expansion.

Boards are ASCII fixtures (`services.games.ascii_board`: top row first, X black, O white);
points are named as the game names them ("c3": column letter, row from the bottom).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.api.movepred.v1 import search_pb2
from services.coords import parse_point
from services.games.ascii_board import board_from_ascii
from services.games.base import InvalidRequest, RequestTooLarge
from services.games.capture import batch as cb
from services.games.capture.game import CAPTURE, CaptureState
from services.games.registry import get_game, registered_games
from tests import capture_reference as ref


def flat(text: str) -> np.ndarray:
    """One board as the engine takes it: int8 [1, S*S]."""
    board = board_from_ascii(text)
    return np.ascontiguousarray(board.reshape(1, -1))


def at(name: str, size: int = 5) -> int:
    x, y = parse_point(name, size)
    return y * size + x


def greedy(board: np.ndarray, colour: int, u: float = 0.0) -> int:
    """The batched greedy move on one board, checked against the reference first."""
    size = cb.board_size(board)
    move = int(cb.greedy_moves(board, colour, np.array([u]))[0])
    assert move == ref.greedy_move(board[0].tolist(), colour, size, u)
    return move


def greedy_choices(board: np.ndarray, colour: int) -> set[int]:
    """Every move the greedy player picks over tie-break numbers spread over [0, 1)."""
    return {greedy(board, colour, u) for u in np.linspace(0, 1, 41, endpoint=False)}


def play_one(board: np.ndarray, colour: int, move: int) -> int:
    """`cb.play` on a copy, checked against the reference's result and board."""
    cells = board.copy()
    result = int(cb.play(cells, colour, np.array([move]))[0])
    expected = board[0].tolist()
    assert result == ref.play(expected, colour, move, cb.board_size(board))
    assert cells[0].tolist() == expected
    return result


# ---- rules ----------------------------------------------------------------------------------
ATARI = """
. . . . .
. . . . .
. . . . .
X O X . .
. X . . .
"""  # white b2 has one liberty, b3


def test_the_first_capture_wins_and_removes_nothing() -> None:
    board = flat(ATARI)
    cells = board.copy()
    assert cb.play(cells, cb.BLACK, np.array([at("b3")]))[0] == cb.CAPTURED
    assert cells[0, at("b2")] == cb.WHITE and cells[0, at("b3")] == cb.BLACK
    assert play_one(board, cb.BLACK, at("d4")) == cb.GOES_ON


SUICIDE_POINT = """
. . . . .
. . . . .
. . . . .
X . . . .
. X . . .
"""  # a1 is surrounded by black stones with liberties


def test_suicide_is_legal_and_loses_but_a_capture_is_not_suicide() -> None:
    board = flat(SUICIDE_POINT)
    assert cb.legal_masks(board)[0, at("a1")]  # every empty point is legal
    assert play_one(board, cb.WHITE, at("a1")) == cb.SUICIDE
    assert play_one(board, cb.BLACK, at("a1")) == cb.GOES_ON  # own eye: fine
    # white a1 with no liberty of its own, but black b1 in atari: the capture comes first
    squeezed = flat("""
. . . . .
. . . . .
. . . . .
X O . . .
. X O . .
""")
    assert play_one(squeezed, cb.WHITE, at("a1")) == cb.CAPTURED


def test_a_group_in_one_liberty_filled_by_its_owner_is_suicide() -> None:
    board = flat("""
. . . . .
. . . . .
O . . . .
X O . . .
. X O . .
""")
    # black a2 and b1 share their last liberty a1: black a1 joins them with no liberty
    assert play_one(board, cb.BLACK, at("a1")) == cb.SUICIDE
    assert play_one(board, cb.WHITE, at("a1")) == cb.CAPTURED


def test_liberties_per_group() -> None:
    board = flat("""
. . . . .
. . . . .
. X X . .
X O . . .
. X . . .
""")
    libs = cb.liberties(board)[0]
    assert libs.tolist() == ref.liberties(board[0].tolist(), 5)
    assert libs[at("b3")] == libs[at("c3")] == 5  # b4 c4 d3 c2 a3
    assert libs[at("b2")] == 1 and libs[at("a2")] == 2 and libs[at("b1")] == 2
    assert libs[at("e5")] == 0  # empty


def test_the_last_empty_point_always_captures() -> None:
    """Why there is no draw and never "no legal move": with one point left every group touches
    it, so a stone there captures (here on 3x3, both colours to move)."""
    board = flat("""
X O X
X O .
X O O
""")
    assert cb.legal_masks(board)[0].sum() == 1
    for colour in (cb.BLACK, cb.WHITE):
        assert play_one(board, colour, at("c2", 3)) == cb.CAPTURED


def test_taken_points_are_refused() -> None:
    board = flat(ATARI)
    with pytest.raises(ValueError, match="taken"):
        cb.play(board, cb.BLACK, np.array([at("b2")]))
    assert board[0].tolist() == flat(ATARI)[0].tolist()


# ---- the greedy opponent, rule by rule ------------------------------------------------------
TWO_ATARIS = """
. . . X .
. . X O X
. . . . .
O . . . .
X . . . .
"""  # black a1 in atari (liberty b1), white d4 in atari (liberty d3)


def test_greedy_captures_first() -> None:
    board = flat(TWO_ATARIS)
    assert greedy_choices(board, cb.BLACK) == {at("d3")}  # not the extension b1
    assert greedy_choices(board, cb.WHITE) == {at("b1")}  # not the extension d3


def test_greedy_extends_a_group_in_atari() -> None:
    board = flat("""
. . . . .
. . . . .
. . . . .
O . . . .
X . . . .
""")
    # black a1 is in atari (liberty b1) and nothing can be captured: it extends at b1, where
    # p - q alone would tie b1 with b2 and a3 (all 0)
    assert greedy_choices(board, cb.BLACK) == {at("b1")}
    # two groups in atari, a1 (b1) and e5 (e4): either extension leaves p - q = 1 - 2
    board[0, at("e5")], board[0, at("d5")] = cb.BLACK, cb.WHITE
    assert greedy_choices(board, cb.BLACK) == {at("b1"), at("e4")}


P_MINUS_Q = """
. . . . .
. . O . .
. . X . .
. . . . .
. . . . .
"""


def test_greedy_maximises_p_minus_q_and_breaks_ties_by_u() -> None:
    board = flat(P_MINUS_Q)
    # black joining c3 (b3, d3, c2) makes a group of 5 liberties, white keeps 3: p - q = 2;
    # b4 / d4 / c5 take a white liberty but make a 3-liberty black stone next to c3's 3: 1
    assert greedy_choices(board, cb.BLACK) == {at("c2"), at("b3"), at("d3")}
    # the tied candidates in point order (c2 = 7, b3 = 11, d3 = 13), the one at floor(u * 3)
    assert [greedy(board, cb.BLACK, u) for u in (0.0, 0.34, 0.5, 0.67, 0.999)] == [
        at("c2"), at("b3"), at("b3"), at("d3"), at("d3")]
    # white on the edge side: c5 joins for only 4 liberties
    assert greedy_choices(board, cb.WHITE) == {at("b4"), at("d4")}


def test_greedy_first_move_takes_the_most_liberties() -> None:
    """No opponent stone: q is 0 for every move, so p decides: the nine inner points (4)."""
    board = cb.empty_boards(1, 5)
    inner = {at(f"{c}{r}") for c in "bcd" for r in (2, 3, 4)}
    assert greedy_choices(board, cb.BLACK) == inner


def test_greedy_with_only_suicides_plays_at_random() -> None:
    """Where the Java player would pass (no move that is not suicide): a random empty point,
    as the paper did; it loses."""
    board = flat("""
X X X
X . X
. X .
""")
    assert greedy_choices(board, cb.WHITE) == {at("a1", 3), at("c1", 3), at("b2", 3)}
    assert play_one(board, cb.WHITE, greedy(board, cb.WHITE, 0.5)) == cb.SUICIDE


def test_greedy_never_chooses_suicide_while_it_has_another_move() -> None:
    board = flat(SUICIDE_POINT)
    rng = np.random.default_rng(0)
    moves = cb.greedy_moves(np.repeat(board, 200, axis=0), cb.WHITE, rng.random(200))
    assert at("a1") not in set(moves.tolist())


# ---- the batched engine against the reference -----------------------------------------------
@pytest.mark.parametrize("size", [5, 7, 9])
def test_batched_engine_agrees_with_the_reference_move_by_move(size: int) -> None:
    """Seeded games (the mover half the time greedy, half the time a random point): at every
    position the greedy move of both colours, the liberties, and each move's result and board
    are the reference's."""
    rng = np.random.default_rng(size)
    n = {5: 60, 7: 30, 9: 16}[size]
    cells = cb.empty_boards(n, size)
    live = np.arange(n)
    colour = cb.BLACK
    checked = 0
    while live.size:
        u = rng.random(live.size)
        mine = cb.greedy_moves(cells, colour, u, rows=live)
        theirs = cb.greedy_moves(cells, 3 - colour, u, rows=live)
        libs = cb.liberties(cells[live])
        for i, b in enumerate(live):
            board = cells[b].tolist()
            assert mine[i] == ref.greedy_move(board, colour, size, u[i])
            assert theirs[i] == ref.greedy_move(board, 3 - colour, size, u[i])
            assert libs[i].tolist() == ref.liberties(board, size)
            checked += 1
        moves = np.where(rng.random(live.size) < 0.5, mine, -1)
        for i, b in enumerate(live):
            if moves[i] < 0:
                moves[i] = rng.choice(np.flatnonzero(cells[b] == cb.EMPTY))
        before = cells[live].copy()
        result = cb.play(cells, colour, moves, rows=live)
        for i, b in enumerate(live):
            board = before[i].tolist()
            assert result[i] == ref.play(board, colour, int(moves[i]), size)
            assert cells[b].tolist() == board
        live = live[result == cb.GOES_ON]
        colour = 3 - colour
    assert checked > 5 * n


class LinearPolicy:
    """A fixed random linear policy over the board seen from the side to move (numpy)."""

    def __init__(self, size: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.weights = rng.normal(size=(size * size, size * size)).astype(np.float32)
        self.bias = rng.normal(size=size * size).astype(np.float32)

    def __call__(self, boards: np.ndarray, to_move: np.ndarray) -> np.ndarray:
        flat_boards = boards.reshape(len(boards), -1)
        me = to_move[:, None]
        x = (flat_boards == me).astype(np.float32) - ((flat_boards != me)
                                                      & (flat_boards != 0)).astype(np.float32)
        return (x @ self.weights + self.bias).reshape(boards.shape)


@pytest.mark.parametrize("size", [5, 7])
def test_play_games_agrees_with_the_reference_game_by_game(size: int) -> None:
    policy = LinearPolicy(size, seed=size)
    results = cb.play_games(policy, 48, size, np.random.default_rng(11), batch_size=20)
    rng = np.random.default_rng(11)
    expected, plies = [], []
    for start in range(0, 48, 20):
        n = min(20, 48 - start)
        uniforms = cb.tie_uniforms(rng, size, n)
        for j in range(n):
            colour = cb.BLACK if (start + j) % 2 == 0 else cb.WHITE
            outcome, moves = ref.play_game(policy, size, colour, uniforms[:, j])
            expected.append(outcome)
            plies.append(len(moves))
    assert results.outcomes.tolist() == expected
    assert results.plies.tolist() == plies
    assert results.network_colour.tolist() == [1, 2] * 24
    assert results.wins + results.losses == 48 and results.draws == 0
    assert results.fitness == pytest.approx((results.wins - results.losses) / 48)


def test_play_games_is_reproducible_with_a_seed() -> None:
    policy = LinearPolicy(5, seed=1)
    a = cb.play_games(policy, 300, 5, np.random.default_rng(4), batch_size=128)
    b = cb.play_games(policy, 300, 5, np.random.default_rng(4), batch_size=128)
    c = cb.play_games(policy, 300, 5, np.random.default_rng(5), batch_size=128)
    assert a.outcomes.tolist() == b.outcomes.tolist() and a.plies.tolist() == b.plies.tolist()
    assert a.plies.tolist() != c.plies.tolist()  # the greedy player's ties do vary
    assert a.plies.max() <= 25 and a.draws == 0


def test_a_torch_policy_is_read_and_the_greedy_player_beats_a_random_one() -> None:
    generator = torch.Generator().manual_seed(0)

    def random_policy(boards: np.ndarray, to_move: np.ndarray) -> torch.Tensor:
        return torch.rand(boards.shape, generator=generator)

    results = cb.play_games(random_policy, 400, 5, np.random.default_rng(0))
    assert results.wins + results.losses == 400
    assert results.fitness < -0.8  # random moves lose to the greedy player


def test_network_moves_skip_taken_points_and_nan() -> None:
    board = flat(ATARI)
    scores = np.zeros((1, 25), np.float32)
    scores[0, at("b2")] = 9  # taken
    scores[0, at("a1")] = np.nan
    scores[0, at("e5")] = scores[0, at("d5")] = 3  # a tie: the lower point
    assert cb.network_moves(board, scores).tolist() == [at("d5")]
    assert cb.network_moves(board, np.full((1, 5, 5), np.nan)).tolist() == [at("a1")]


# ---- the registered game --------------------------------------------------------------------
def request(*moves: str, size: int = 0, **fields: object) -> search_pb2.Position:
    s = size or 5
    points = [search_pb2.Point(x=parse_point(m, s)[0], y=parse_point(m, s)[1]) for m in moves]
    return search_pb2.Position(game_name=CAPTURE.name, board_size=size, moves=points, **fields)


def test_the_game_is_registered() -> None:
    assert get_game("capture") is CAPTURE
    assert CAPTURE in registered_games()
    assert CAPTURE.sizes == (5, 6, 7, 8, 9) and CAPTURE.policy_size(7) == 49
    assert CAPTURE.input_shape(9) == (9, 9) and not CAPTURE.has_pass


def test_positions_follow_the_engine() -> None:
    state = CAPTURE.position_from_request(request("b1", "b2", "a2", "e5", "c2", "e4"), "p")
    assert isinstance(state, CaptureState)  # a test may know the class
    assert state.board.tolist() == board_from_ascii("""
. . . . O
. . . . O
. . . . .
X O X . .
. X . . .
""").tolist()
    assert state.to_move == cb.BLACK and not state.is_over
    assert state.legal_mask().sum() == 19
    won = state.play(at("b3"))
    assert won.is_over and won.winner == cb.BLACK and CAPTURE.terminal_value(won) == 1.0
    assert not won.legal_mask().any()
    with pytest.raises(ValueError, match="over"):
        won.play(at("d4"))
    lost = CAPTURE.start().play(at("b1")).play(at("e5")).play(at("a2")).play(at("a1"))
    assert lost.is_over and lost.winner == cb.BLACK and CAPTURE.terminal_value(lost) == -1.0


def test_requests_are_validated() -> None:
    cases = [
        (request(size=4), InvalidRequest, "p.board_size: Capture Game is served on sizes 5..9"),
        (request(size=10), InvalidRequest, "p.board_size"),
        (request("a1", "a1"), InvalidRequest, "p.moves[1]: a1: occupied"),
        (request("b1", "e5", "a2", "a1"), InvalidRequest,
         "p.moves[3]: a1 is suicide for white"),
        (request("b1", "b2", "a2", "e5", "c2", "e4", "b3", "d4"), InvalidRequest,
         "p.moves[7]: the game ended at moves[6]"),
        (request(komi=0.5), InvalidRequest, "p.komi"),
        (request(rule=search_pb2.RULE_GO_AREA), InvalidRequest, "p.rule"),
        (request(setup_black=[search_pb2.Point(x=1, y=1)]), InvalidRequest, "p.setup_black"),
        (request(*(["a1"] * 26)), RequestTooLarge, "p.moves: at most 25 moves"),
    ]
    for position, error, message in cases:
        with pytest.raises(error) as info:
            CAPTURE.position_from_request(position, "p")
        assert str(info.value).startswith(message), str(info.value)
    won = CAPTURE.position_from_request(request("b1", "b2", "a2", "e5", "c2", "e4", "b3"), "p")
    over = r"the game is over: black won \(black captured at b3\)"
    with pytest.raises(InvalidRequest, match=over):
        CAPTURE.require_playable(won, "p")
    CAPTURE.require_playable(CAPTURE.position_from_request(request(size=7), "p"), "p")


def test_expand_proves_captures_and_leaves_out_suicide() -> None:
    state = CAPTURE.position_from_request(request("b1", "b2", "a2", "e5", "c2", "e4"), "p")
    e = CAPTURE.expand(state)
    assert e.proven_win and list(e.candidates) == [at("b3")]
    quiet = CAPTURE.position_from_request(request("b1", "e5", "a2"), "p")  # white to move
    e = CAPTURE.expand(quiet)
    assert not e.proven_win and at("a1") not in e.candidates and len(e.candidates) == 21
    assert CAPTURE.expand(state.play(at("b3"))).terminal_value == 1.0
    _, (board, right) = next(iter(CAPTURE.tactical_positions().items()))
    assert right == (at("b3"),) and board.tolist() == state.board.tolist()


def test_random_moves_pick_each_empty_point_by_its_number() -> None:
    boards = cb.empty_boards(3, 3)
    boards[:, [0, 4, 8]] = cb.BLACK  # six empty points: 1, 2, 3, 5, 6, 7
    moves = cb.random_moves(boards, np.array([0.0, 0.5, 0.999]))
    assert moves.tolist() == [1, 5, 7]
    assert cb.random_moves(boards, np.array([0.2]), rows=np.array([2])).tolist() == [2]
    u = np.random.default_rng(0).random(6000)
    picked = cb.random_moves(np.repeat(boards[:1], 6000, axis=0), u)
    assert set(picked.tolist()) == {1, 2, 3, 5, 6, 7}
    assert np.bincount(picked, minlength=9)[[1, 2, 3, 5, 6, 7]].min() > 900
    full = np.full((1, 9), cb.BLACK, np.int8)
    with pytest.raises(ValueError, match="no empty point"):
        cb.random_moves(full, np.array([0.5]))
