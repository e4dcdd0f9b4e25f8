"""The compiled fast rollouts (services/games/rollout.py and each game's rollout module)
against the Python rules, and the rollout policy's incremental logits against its network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.games.base import BLACK, WHITE
from services.games.go import rules as go_rules
from services.games.go.features import compact
from services.games.gomoku import rules as gomoku_rules
from services.games.gomoku.search_kernels import five_through
from services.games.registry import get_game
from services.games.rollout import RolloutWeights
from services.models.rollout import LinearRolloutPolicy
from tests.evaluators import HashEvaluator

torch.set_num_threads(1)
GOMOKU = get_game("gomoku")
GO = get_game("go")


def random_weights(seed: int = 0, k: int = 5) -> RolloutWeights:
    rng = np.random.default_rng(seed)
    return RolloutWeights(rng.normal(0, 0.5, (3, k, k)).astype(np.float32),
                          float(rng.normal()))


def gomoku_board(rows: list[str]) -> np.ndarray:
    """15x15 board from text rows (top row of the text is y = 0), X black, O white."""
    board = np.zeros((15, 15), np.int8)
    for y, row in enumerate(rows):
        for x, c in enumerate(row.replace(" ", "")):
            board[y, x] = {"X": BLACK, "O": WHITE}.get(c, 0)
    return board


@pytest.mark.parametrize("rule", [gomoku_rules.Rule.FREESTYLE, gomoku_rules.Rule.STANDARD])
def test_five_kernel_matches_rules(rule: gomoku_rules.Rule) -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        board = rng.choice([0, 1, 2], size=(15, 15), p=[0.3, 0.4, 0.3]).astype(np.int8)
        p = int(rng.integers(225))
        colour = int(board.flat[p])
        if colour == 0:
            continue
        want = gomoku_rules.makes_five(board, p % 15, p // 15, colour, rule)
        got = five_through(board.reshape(-1).astype(np.uint8), 15, p, colour,
                           rule is gomoku_rules.Rule.STANDARD)
        assert got == want


def test_gomoku_rollouts_play_legal_games_to_the_right_result() -> None:
    rollouts = GOMOKU.rollouts()
    start = np.zeros((15, 15), np.int8)
    start[7, 7], start[7, 8], start[8, 8] = BLACK, WHITE, BLACK  # white to move
    results = set()
    for seed in range(12):
        moves, final, z = rollouts.first_game(start, random_weights(seed), seed=seed)
        cells = rollouts.leaf_cells(start[None])[0].copy()
        side, won = 1, 0
        for i, p in enumerate(moves):
            assert cells[p] == 0, "a rollout move on an occupied point"
            cells[p] = side
            five = gomoku_rules.makes_five(cells.reshape(15, 15), p % 15, p // 15, side,
                                           gomoku_rules.Rule.FREESTYLE)
            if five:
                assert i == len(moves) - 1, "the rollout went on after a five"
                won = 1 if side == 1 else -1
            side = 3 - side
        assert np.array_equal(cells, final)
        assert z == won
        assert won != 0 or not (cells == 0).any()  # a draw only on a full board
        results.add(won)
    assert results >= {1, -1}


def test_open_four_wins_and_facing_one_loses() -> None:
    rollouts = GOMOKU.rollouts()
    w = random_weights(3)
    four = gomoku_board(["", "", "", "", "", "", "", "...XXXX", "", "", "", "",
                         "OOO", "", "O"])  # black to move with an open four
    assert rollouts.play(four[None], w, seed=1, rollouts=64)[0] == 1.0
    facing = gomoku_board(["", "", "", "", "", "", "", "...XXXX", "", "", "", "",
                           "OO", "", "O"])  # white to move, black's open four
    assert rollouts.play(facing[None], w, seed=1, rollouts=64)[0] == -1.0


def test_standard_rule_overline_is_no_win() -> None:
    # black to move; b8 would join XXXX.X... into six: a five only under freestyle
    board = gomoku_board(["", "", "", "", "", "", "", "XX.XXX", "", "", "", "",
                          "OOO", "", "OO"])
    cells = GOMOKU.rollouts().leaf_cells(board[None])[0]
    cells[7 * 15 + 2] = 1
    assert five_through(cells, 15, 7 * 15 + 2, 1, False)
    assert not five_through(cells, 15, 7 * 15 + 2, 1, True)


def go_leaf(moves: int, seed: int, size: int = 9) -> go_rules.GoState:
    rng = np.random.default_rng(seed)
    state = go_rules.GoState(size)
    for _ in range(moves):
        legal = np.flatnonzero(state.legal_mask())
        state = state.play(int(rng.choice(legal)))
    return state


def test_go_rollouts_follow_the_rules_and_score_by_area() -> None:
    rollouts = GO.rollouts()
    captured = 0
    for seed in range(8):
        leaf = go_leaf(20 + seed, seed)
        mover = leaf.to_move
        moves, final, z = rollouts.first_game(compact(leaf), random_weights(seed), seed=seed,
                                              komi=7.5, colour=mover)
        state = leaf
        for m in moves:
            if m is not None:  # never into the mover's own eye
                assert not _own_eye(state, m), "a rollout filled its own eye"
            state = state.play(m)  # raises IllegalMove for an illegal rollout move
        captured += state.captures[BLACK] + state.captures[WHITE] - sum(leaf.captures.values())
        own = np.frombuffer(state.cells, np.uint8)
        relative = np.where(own == 0, 0, np.where(own == mover, 1, 2))
        assert np.array_equal(relative, final)
        assert state.is_over or len(moves) == 2 * 81
        score = state.score(7.5) * (1 if mover == BLACK else -1)
        assert z == np.sign(score)
    assert captured > 0


def _own_eye(state: go_rules.GoState, point: int) -> bool:
    size = state.size
    colour = state.to_move
    y, x = divmod(point, size)
    cells = np.frombuffer(state.cells, np.uint8).reshape(size, size)
    for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)):
        if 0 <= y + dy < size and 0 <= x + dx < size and cells[y + dy, x + dx] != colour:
            return False
    diag = [cells[y + dy, x + dx] for dy in (-1, 1) for dx in (-1, 1)
            if 0 <= y + dy < size and 0 <= x + dx < size]
    bad = sum(c == 3 - colour for c in diag)
    return bad == 0 if len(diag) < 4 else bad < 2


def test_go_komi_decides_for_the_right_colour() -> None:
    # black owns the board (two eyes): it wins as the mover unless the komi is too much
    text = "\n".join(["XXXXXXXXX"] * 4 + ["XXXX.XXXX", "XXXXXXXXX", "XX.XXXXXX"]
                     + ["XXXXXXXXX"] * 2)
    state = go_rules.GoState.from_ascii(text, to_move=WHITE)
    board = compact(state)[None]
    rollouts = GO.rollouts()
    w = random_weights(0)
    assert rollouts.play(board, w, komi=7.5, colours=np.array([WHITE]))[0] == -1.0
    assert rollouts.play(board, w, komi=100, colours=np.array([WHITE]))[0] == 1.0
    assert rollouts.play(board, w, komi=100, colours=np.array([BLACK]))[0] == -1.0


class ColourRecorder:
    """An evaluator that takes colours (as the rollout wrapper does) and keeps them."""

    takes_colours = True

    def __init__(self) -> None:
        self.inner = HashEvaluator(has_pass=True)
        self.boards: list[np.ndarray] = []
        self.colours: list[int] = []

    def infer(self, boards: np.ndarray, colours: np.ndarray | None = None):
        assert colours is not None and len(colours) == len(boards)
        self.boards.extend(boards)
        self.colours.extend(int(c) for c in colours)
        return self.inner.infer(boards)


def _balance_guess(board: np.ndarray, root: np.ndarray, root_colour: int) -> int:
    """The colour a stone count would guess for a leaf (what the search no longer does)."""
    def balance(planes: np.ndarray) -> int:
        return int((planes[0] == 1).sum()) - int((planes[0] == 2).sum())
    d, d_root = balance(board), balance(root)
    return root_colour if abs(d - d_root) <= abs(d + d_root + 1) else 3 - root_colour


def test_a_go_search_passes_each_leafs_colour() -> None:
    """The compiled search gives the evaluator the colours the interpreted one reads off its
    positions, passes and captures in the tree included (where a stone count goes wrong)."""
    from services.games.go.game import GoSearchState
    from services.search import interpreted, mcts

    state = GoSearchState(go_leaf(6, 3, size=5))
    compiled, reference = ColourRecorder(), ColourRecorder()
    mcts.Search(state, compiled).run(300)
    interpreted.Search(state, reference).run(300)
    assert compiled.colours == reference.colours
    assert all(np.array_equal(a, b) for a, b in zip(compiled.boards, reference.boards,
                                                    strict=True))
    assert set(compiled.colours) == {BLACK, WHITE}
    root = GO.network_input(state)
    guesses = [_balance_guess(b, root, state.to_move) for b in compiled.boards]
    assert guesses != compiled.colours  # the tree holds leaves a stone count gets wrong


def test_colours_of_a_reused_tree_are_its_positions() -> None:
    from services.games.go.game import GoSearchState
    from services.search import mcts

    state = GoSearchState(go_leaf(6, 4, size=5))
    first = mcts.Search(state, ColourRecorder())
    first.run(200)
    child = first.root.child(first.result().move).compacted()  # the other colour to move
    recorder = ColourRecorder()
    mcts.Search(child, recorder).run(child.visits + 100)
    assert recorder.colours
    data = child._data
    nodes = np.arange(int(data.tree.used[0]))
    want = [mcts.Node(data, int(i)).state.to_move for i in nodes]
    assert mcts._colours(data, nodes).tolist() == want
    assert set(want) == {BLACK, WHITE}


@pytest.mark.parametrize("game_name", ["gomoku", "go"])
def test_incremental_logits_are_the_networks(game_name: str) -> None:
    game = get_game(game_name)
    net = LinearRolloutPolicy(game_name, 5)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn_like(p))
    w = RolloutWeights.from_arrays(net.weights())
    if game_name == "go":
        boards = np.stack([compact(go_leaf(n, n, 9)) for n in (0, 7, 30)])
    else:
        boards = game.sample_inputs(5, seed=2)
    with torch.no_grad():
        want = net(torch.from_numpy(boards)).numpy()
    cells = game.rollouts().leaf_cells(boards)
    size = boards.shape[-1]
    for i in range(len(boards)):
        logits = w.logits(cells[i], size)
        np.testing.assert_allclose(logits[0], want[i, :size * size], rtol=1e-4, atol=1e-4)


def test_rollouts_are_seeded() -> None:
    boards = np.zeros((6, 15, 15), np.int8)
    w = random_weights(1)
    r = GOMOKU.rollouts()
    a = r.play(boards, w, seed=5, rollouts=3)
    assert np.array_equal(a, r.play(boards, w, seed=5, rollouts=3))
    assert not np.array_equal(a, r.play(boards, w, seed=6, rollouts=3))


def test_weights_round_trip() -> None:
    w = RolloutWeights(random_weights(2).kernel, 0.25, np.arange(4, dtype=np.float32),
                       "rollout_k5", 0.31)
    back = RolloutWeights.from_bytes(w.to_bytes())
    assert np.array_equal(back.kernel, w.kernel) and back.bias == 0.25
    assert back.config == "rollout_k5" and back.top1 == pytest.approx(0.31)
    with pytest.raises(ValueError):
        RolloutWeights.from_bytes(b"not an npz")
