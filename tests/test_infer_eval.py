"""The evaluation of move-order inference on real games: which games make a set, and the
paper's figures, on hand-made games and numbers whose answers are known."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from services.api.movepred.v1 import search_pb2
from services.games.registry import get_game
from services.models import configs
from services.move_order.annealing import AnnealingParams
from services.move_order.evaluation import (
    GO_CLEAN_MOVES,
    HELD_OUT,
    KEPT_OUT,
    EvalPosition,
    RecordedGame,
    build_set,
    evaluate_position,
    exclusion,
    figures,
    kept_out,
    move_match,
    policy_top1,
    share_at_least,
    slope_through_origin,
)

SIZE = 19


@dataclass(frozen=True)
class Output:
    logits: np.ndarray
    model_name: str = "random weights"
    model_version: str = "1"


class InProcess:
    """A network in this process as a `PolicyEvaluator`."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model.eval()

    def infer(self, boards: np.ndarray) -> Output:
        with torch.inference_mode():
            out = self.model(torch.from_numpy(np.ascontiguousarray(boards)))
        out = out[0] if isinstance(out, tuple) else out
        return Output(out.to(torch.float32).numpy())


def p(x: int, y: int) -> int:
    return y * SIZE + x


# points two apart on both axes: no stone ever touches another, so nothing can be captured
SPREAD = [p(x, y) for y in range(0, SIZE, 2) for x in range(0, SIZE, 2)]


def go_record(game_id: str, moves: list[int | None], setup: int = 0) -> RecordedGame:
    return RecordedGame(game_id, SIZE, tuple(moves), setup)


def clean_go(game_id: str = "clean", n: int = 60) -> RecordedGame:
    return go_record(game_id, SPREAD[:n])


def test_a_go_game_without_capture_or_pass_qualifies():
    assert exclusion(get_game("go"), clean_go(), 40, GO_CLEAN_MOVES) is None


def test_a_capture_before_move_50_excludes_a_go_game_even_from_the_20_move_set():
    # B b1, W b2, B a2, W (far), B c2, W (far), B b3 captures the white stone at b2 (move 7);
    # the rest are spread far from the corner
    corner = [p(1, 0), p(1, 1), p(0, 1), p(10, 10), p(2, 1), p(12, 12), p(1, 2)]
    far = [q for q in SPREAD if q % SIZE >= 4 and q // SIZE >= 4 and q not in corner]
    record = go_record("capture", corner + far[:50])
    why = exclusion(get_game("go"), record, 20, GO_CLEAN_MOVES)
    assert why == "capture at move 7"
    # the same stones without the capturing move (a far one instead) qualify
    assert exclusion(get_game("go"), go_record("no-capture", corner[:6] + far[:50]), 20,
                     GO_CLEAN_MOVES) is None


def test_a_capture_after_move_50_does_not_exclude():
    corner = [p(1, 0), p(1, 1), p(0, 1), p(10, 10), p(2, 1), p(12, 12), p(1, 2)]
    far = [q for q in SPREAD if q % SIZE >= 4 and q // SIZE >= 4 and q not in corner]
    moves = corner[:6] + far[:44] + [corner[6]]  # the capture is move 51
    assert len(moves) == 51
    assert exclusion(get_game("go"), go_record("late", moves), 40, GO_CLEAN_MOVES) is None


def test_handicap_pass_and_short_games_are_excluded():
    go = get_game("go")
    assert exclusion(go, go_record("ha", SPREAD[:60], setup=2), 20, GO_CLEAN_MOVES) == (
        "handicap or set-up stones")
    assert exclusion(go, go_record("pass", [*SPREAD[:30], None, *SPREAD[30:60]]), 20,
                     GO_CLEAN_MOVES) == "pass at move 31"
    assert exclusion(go, clean_go("short", 30), 40, GO_CLEAN_MOVES) == "short (30 moves < 40)"
    assert exclusion(go, clean_go("ok", 30), 20, 0) is None


def test_a_renju_game_shorter_than_the_set_is_excluded():
    gomoku = get_game("gomoku")
    moves = tuple(y * 15 + x for x, y in [(7, 7), (8, 8), (7, 9), (9, 7), (5, 5), (10, 2)])
    assert exclusion(gomoku, RecordedGame("r", 15, moves), 6) is None
    assert exclusion(gomoku, RecordedGame("r", 15, moves), 7) == "short (6 moves < 7)"


def test_build_set_takes_held_out_games_first_then_kept_out_ones_and_nothing_else():
    go = get_game("go")
    records = [clean_go(f"g{i}") for i in range(6)] + [clean_go("short", 10)]
    positions = build_set(go, records, 20, held_out={"g0", "g1", "short"},
                          kept={"g2", "g3"}, clean=GO_CLEAN_MOVES)
    assert [q.origin for q in positions] == [HELD_OUT, HELD_OUT, KEPT_OUT, KEPT_OUT]
    assert {q.game_id for q in positions[:2]} == {"g0", "g1"}
    assert {q.game_id for q in positions[2:]} == {"g2", "g3"}
    first = positions[0]
    assert first.order == tuple(SPREAD[:20]) and first.key == f"{first.game_id}@20"
    assert first.black == sorted(SPREAD[:20:2]) and first.white == sorted(SPREAD[1:20:2])
    assert len(build_set(go, records, 20, {"g0", "g1"}, {"g2", "g3"}, limit=3)) == 3


def test_kept_out_is_a_fixed_choice_of_the_ids():
    ids = [f"game{i}" for i in range(50)]
    chosen = kept_out(ids, 10)
    assert len(chosen) == 10 and chosen <= set(ids)
    assert kept_out(list(reversed(ids)), 10) == chosen
    assert kept_out(ids, 11) > chosen


def test_slope_through_the_origin():
    assert slope_through_origin([1, 2, 3], [2, 4, 6]) == pytest.approx(2.0)
    # sum(xy) / sum(x^2) = (1 + 4 + 12) / 14, not the slope with an intercept (1.5)
    assert slope_through_origin([1, 2, 3], [1, 2, 4]) == pytest.approx(17 / 14)
    with pytest.raises(ValueError):
        slope_through_origin([0, 0], [1, 2])


def test_share_at_least_counts_ties_within_rounding():
    actual = [0.5, 0.5, 0.5, 0.5]
    inferred = [0.6, 0.5, 0.4, 0.5 * (1 - 1e-12)]
    assert share_at_least(actual, inferred) == pytest.approx(0.75)
    assert math.isnan(share_at_least([], []))


def test_move_match_counts_plies_with_the_actual_move():
    assert move_match([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert move_match([1, 2, 3, 4], [3, 2, 1, 4]) == 0.5
    with pytest.raises(ValueError):
        move_match([1, 2], [1])


def test_figures_of_hand_made_rows():
    rows = [
        {"actual_gm": 0.2, "inferred_gm": 0.3, "greedy_gm": 0.1, "exact": False,
         "move_match": 0.5, "greedy_move_match": 0.25, "spread": 0.01, "seconds": 1.0,
         "cpu_seconds": 0.5, "boards": 10},
        {"actual_gm": 0.4, "inferred_gm": 0.4, "greedy_gm": 0.4, "exact": True,
         "move_match": 1.0, "greedy_move_match": 1.0, "spread": 0.03, "seconds": 3.0,
         "cpu_seconds": 1.5, "boards": 30},
    ]
    f = figures(rows)
    assert f["positions"] == 2
    assert f["share_at_least_actual"] == 1.0
    assert f["greedy_share_at_least_actual"] == 0.5
    assert f["slope"] == pytest.approx((0.2 * 0.3 + 0.4 * 0.4) / (0.2 ** 2 + 0.4 ** 2))
    assert f["exact"] == 0.5
    assert f["move_match"] == pytest.approx(0.75)
    assert f["spread"] == pytest.approx(0.02)
    assert f["cpu_seconds"] == pytest.approx(1.0)
    assert f["actual_beaten"] == 0.5  # the first row's inferred order is the more likely
    # an exact match a float32 rounding above the actual order is no other order
    assert figures([rows[1] | {"inferred_gm": 0.4 * (1 + 5e-8)}])["actual_beaten"] == 0.0
    assert math.isnan(f["actual_top1"])  # rows from before the figure existed
    assert figures([rows[0] | {"actual_top1": 0.25}, rows[1] | {"actual_top1": 0.75}])[
        "actual_top1"] == pytest.approx(0.5)


def test_policy_top1_counts_plies_whose_move_is_the_first_choice():
    rows = [np.array([0.1, 0.7, 0.2]), np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])]
    assert policy_top1(rows, [1, 1, 2]) == pytest.approx(2 / 3)
    assert policy_top1([], []) == 1.0


def test_evaluate_position_scores_the_actual_order_and_keeps_the_best_of_greedy_and_annealing():
    torch.manual_seed(0)
    gomoku = get_game("gomoku")
    net = InProcess(configs.build(gomoku.default_config))

    order = tuple(y * 15 + x for x, y in [(7, 7), (8, 8), (7, 9), (9, 7), (5, 5), (10, 2)])
    position = EvalPosition("g@6", "g", HELD_OUT, 15, order)
    row = evaluate_position(gomoku, position, net, AnnealingParams(iterations=20, restarts=2),
                            search_pb2.RULE_RENJU)
    assert row["actual"] == list(order)
    assert sorted(row["inferred"][0::2]) == sorted(order[0::2])
    assert row["exact"] == (tuple(row["inferred"]) == order)
    assert row["inferred_gm"] >= row["greedy_gm"]
    assert row["inferred_gm"] == pytest.approx(max(row["restart_gms"]))
    assert 0 < row["actual_gm"] <= 1 and 0 <= row["move_match"] <= 1


def test_a_rif_file_of_freestyle_games_is_a_collection_and_prepare_keeps_its_games_out(
        tmp_path):
    """`prepare --game gomoku --records F.rif`: the kept-out games are chosen among the
    file's, the training source is the file less them, and `run` finds the file again in
    kept_out.json; the collection is inferred under the file's one rule."""
    import json

    from scripts.infer_eval import prepare, records_collection
    from services.games.gomoku import selfplay
    from services.records.rif import RifGame, read_rif
    from services.records.rif_writer import write_rif

    rif = write_rif(selfplay.generate(40, seed=3), tmp_path / "bot.rif")
    collection = records_collection(rif)
    assert collection.rule == search_pb2.RULE_FREESTYLE
    games = collection.read()
    assert len(games) == 40 and all(g.size == 15 for g in games)
    info = prepare("gomoku", tmp_path / "prepared", 5, rif)
    kept = set(info["kept_out"])
    assert len(kept) == 5 and info["records"] == str(rif)
    assert json.loads((tmp_path / "prepared" / "kept_out.json").read_text())["records"] == str(rif)
    train = [g for g in read_rif(info["sources"][0]) if isinstance(g, RifGame)]
    assert len(train) == 35 and not kept & {g.game_id for g in train}
    assert {g.rule for g in train} == {"freestyle"}
    mixed = [*selfplay.generate(2, seed=4),
             RifGame("x", "renju-1", (112, 113, 127), rule="RIF")]
    with pytest.raises(ValueError, match="2 rules"):
        records_collection(write_rif(mixed, tmp_path / "mixed.rif"))


class _FirstChoice:
    """An rng stub for `selfplay.choose_move`: records what it is asked to draw from and
    takes the first entry."""

    def __init__(self) -> None:
        self.asked: list[tuple[np.ndarray, np.ndarray | None]] = []

    def choice(self, a, p=None):
        self.asked.append((np.atleast_1d(np.asarray(a)), p))
        return a[0] if np.ndim(a) else 0


def test_the_rule_based_players_distribution_is_the_one_it_draws_from():
    """`move_distribution` (what `infer_eval.py run --rulebot` scores orders with) against
    `choose_move` on every position of a few games: the same probabilities, opening plies
    and urgent moves included, and the played move always possible."""
    from scripts.infer_eval import RuleBotPolicy
    from services.games.gomoku import selfplay

    for game in selfplay.generate(4, seed=11):
        flat = np.zeros(225, dtype=np.int8)
        for ply, move in enumerate(game.moves):
            dist = selfplay.move_distribution(flat)
            assert dist.sum() == pytest.approx(1.0) and dist[move] > 0
            colour = 1 if ply % 2 == 0 else 2
            rng = _FirstChoice()
            opening = ply < selfplay.OPENING_PLIES
            chosen = selfplay.choose_move(
                flat, colour, rng, selfplay.OPENING_TOP_K if opening else selfplay.TOP_K,
                selfplay.OPENING_TEMPERATURE if opening else selfplay.TEMPERATURE)
            if not rng.asked:  # the empty board: the centre
                assert dist[chosen] == 1.0
            else:
                a, p = rng.asked[0]
                drawn = np.full(len(a), 1.0 / len(a)) if p is None else np.asarray(p)
                assert sorted(dist[dist > 0]) == pytest.approx(sorted(drawn))
                assert dist[chosen] == pytest.approx(drawn[0])
            flat[move] = colour
    logits = RuleBotPolicy().infer(np.zeros((2, 15, 15), dtype=np.int8)).logits
    assert logits.shape == (2, 225) and np.isfinite(logits).all()
    assert logits[0].argmax() == selfplay.CENTER
