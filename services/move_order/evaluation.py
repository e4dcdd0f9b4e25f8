"""Move-order inference measured on real games: evaluation sets, one position's run, the figures.

An evaluation position is the first `n` moves of a real game: its stones are what inference
sees, its actual order is what it is scored against. The figures are Hsueh & Ikeda's (2023):
the share of positions whose inferred order is at least as likely (geometric mean of the
policy's factors) as the actual one, the slope of the regression through the origin of the
inferred geometric means on the actual ones, the exact-match rate, the per-move match rate and
the mean standard deviation over the restarts; beside them, the share of positions where the
search found another order at least as likely as the actual one (there the actual order is not
the network's one most likely) and the network's top-1 on the actual moves.

A game qualifies for an `n`-move set when it has at least `n` moves and its first
`max(n, clean)` moves are all stones (no pass) that remove no stone (Go: no capture) from the
empty board (no handicap or set-up stones): the paper's condition for Go, where a capture
would take stones off the board that the position no longer shows. The rules are asked of the
game (`Position.play`), so the same filter serves every game.

The evaluated network must not have trained on the games: a set takes the dataset's
game-level held-out games (`game_test` shards) first and then games kept out of the training
sources (`kept_out`: a fixed choice by a hash of the game id, independent of everything else).
"""

from __future__ import annotations

import glob
import hashlib
import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from services.evaluator import PolicyEvaluator
from services.games.base import Game
from services.move_order.annealing import AnnealingParams, infer_order
from services.move_order.likelihood import PrefixScorer
from services.move_order.problem import problem_from_stones

log = logging.getLogger(__name__)

# Go: no capture (and no pass) in the first CLEAN_MOVES moves (the paper's filter)
GO_CLEAN_MOVES = 50
HELD_OUT = "game_test"  # the dataset's game-level held-out split
KEPT_OUT = "kept_out"  # left out of the training sources by `kept_out`


@dataclass(frozen=True)
class RecordedGame:
    """A real game: its id as the dataset names it, and its moves as flat points
    (`y * size + x`; a pass is `None`), black first, colours alternating."""

    game_id: str
    size: int
    moves: tuple[int | None, ...]
    setup: int = 0  # handicap or set-up stones on the board before the first move


@dataclass(frozen=True)
class EvalPosition:
    """The first `len(order)` moves of a game: the stones to order and the actual order."""

    key: str  # "<game_id>@<n>": unique within a set
    game_id: str
    origin: str  # HELD_OUT or KEPT_OUT
    size: int
    order: tuple[int, ...]

    @property
    def black(self) -> list[int]:
        return sorted(self.order[0::2])

    @property
    def white(self) -> list[int]:
        return sorted(self.order[1::2])


def exclusion(game: Game, record: RecordedGame, n: int, clean: int = 0) -> str | None:
    """Why `record` cannot give an `n`-move position (None: it can): set-up stones, fewer
    than `n` moves, or a pass, an illegal move or a move that removes a stone within its
    first `max(n, clean)` moves."""
    if record.setup:
        return "handicap or set-up stones"
    if len(record.moves) < n:
        return f"short ({len(record.moves)} moves < {n})"
    state = game.start(record.size)
    passing = game.pass_move(record.size)
    for ply, move in enumerate(record.moves[:max(n, clean)]):
        if move is None or move == passing:
            return f"pass at move {ply + 1}"
        try:
            state = state.play(move)
        except ValueError:
            return f"illegal move {ply + 1}"
        if np.count_nonzero(state.board) != ply + 1:
            return f"capture at move {ply + 1}"
        if state.is_over and ply + 1 < n:
            return f"game over at move {ply + 1}"
    return None


def game_hash(game_id: str) -> str:
    """A fixed pseudo-random key of a game id (the order `kept_out` chooses in)."""
    return hashlib.sha256(game_id.encode("utf-8")).hexdigest()


def kept_out(ids: Iterable[str], count: int) -> set[str]:
    """`count` of `ids` chosen by their hash: the games to leave out of training."""
    return set(sorted(ids, key=game_hash)[:count])


def held_out_ids(dataset: Path) -> set[str]:
    """The ids of the games a dataset holds out whole (its `game_test` shards)."""
    ids: set[str] = set()
    for path in sorted(glob.glob(str(Path(dataset) / f"{HELD_OUT}-*.parquet"))):
        ids.update(pq.read_table(path, columns=["game_id"]).column("game_id").to_pylist())
    return ids


def build_set(game: Game, records: Sequence[RecordedGame], n: int, held_out: set[str],
              kept: set[str], limit: int = 0, clean: int = 0) -> list[EvalPosition]:
    """The `n`-move positions of the qualifying games the network never trained on: the
    held-out games first, then the kept-out ones, each group in the fixed hash order, at most
    `limit` (0: all)."""
    groups: dict[str, list[EvalPosition]] = {HELD_OUT: [], KEPT_OUT: []}
    reasons: dict[str, int] = {}
    for record in sorted(records, key=lambda r: game_hash(r.game_id)):
        origin = (HELD_OUT if record.game_id in held_out
                  else KEPT_OUT if record.game_id in kept else None)
        if origin is None:
            continue
        why = exclusion(game, record, n, clean)
        if why is not None:
            reasons[why.split(" ")[0]] = reasons.get(why.split(" ")[0], 0) + 1
            continue
        order = tuple(int(m) for m in record.moves[:n] if m is not None)
        groups[origin].append(EvalPosition(f"{record.game_id}@{n}", record.game_id, origin,
                                           record.size, order))
    out = groups[HELD_OUT] + groups[KEPT_OUT]
    log.info("%d-move set: %d held-out and %d kept-out games qualify; excluded: %s", n,
             len(groups[HELD_OUT]), len(groups[KEPT_OUT]), reasons or "none")
    return out[:limit] if limit else out


def evaluate_position(game: Game, position: EvalPosition, evaluator: PolicyEvaluator,
                      params: AnnealingParams, rule: int) -> dict:
    """One position: the actual order's geometric mean, the inferred order's (and whether it
    is the actual order, move by move), the greedy order's, the restarts' spread, the network
    calls and boards, and the wall and CPU (this process's) seconds of the inference: on a
    shared machine the CPU seconds are the figure that does not depend on the other jobs."""
    problem = problem_from_stones(game, position.black, position.white, position.size, rule)
    actual = PrefixScorer(problem, evaluator).score(position.order)
    if actual is None:
        raise ValueError(f"{position.key}: the actual order breaks the rules of a prefix")
    start, cpu = time.perf_counter(), time.process_time()
    result = infer_order(problem, evaluator, params)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu
    inferred = result.best.order
    return {
        "key": position.key, "game_id": position.game_id, "origin": position.origin,
        "stones": len(position.order),
        "actual_gm": actual.geometric_mean, "inferred_gm": result.best.geometric_mean,
        "greedy_gm": result.greedy.geometric_mean,
        "exact": inferred == position.order,
        "move_match": move_match(position.order, inferred),
        "actual_top1": policy_top1(actual.policies, position.order),
        "greedy_move_match": move_match(position.order, result.greedy.order),
        "restart_gms": [r.best.geometric_mean for r in result.restarts],
        "spread": result.spread, "iterations": result.iterations,
        "restarts": len(result.restarts), "calls": result.calls, "boards": result.boards,
        "seconds": seconds, "cpu_seconds": cpu_seconds,
        "inferred": list(inferred), "actual": list(position.order),
    }


def move_match(actual: Sequence[int], inferred: Sequence[int]) -> float:
    """The share of plies where the inferred order plays the actual move."""
    if len(actual) != len(inferred):
        raise ValueError(f"orders of {len(actual)} and {len(inferred)} moves")
    if not actual:
        return 1.0
    return sum(a == b for a, b in zip(actual, inferred, strict=True)) / len(actual)


def policy_top1(policies: Sequence[np.ndarray], order: Sequence[int]) -> float:
    """The share of plies of `order` whose move is the policy's first choice there: the
    network's top-1 on the position's own moves, which bounds how well any order search on it
    can recover them."""
    if not order:
        return 1.0
    hits = sum(int(np.argmax(row)) == m for row, m in zip(policies, order, strict=True))
    return hits / len(order)


def slope_through_origin(x: Sequence[float], y: Sequence[float]) -> float:
    """The least-squares slope of y = b x (no intercept): sum(xy) / sum(x^2)."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    denom = float(xs @ xs)
    if denom == 0.0:
        raise ValueError("slope through the origin of all-zero x")
    return float(xs @ ys) / denom


def share_at_least(actual: Sequence[float], inferred: Sequence[float],
                   rel_tol: float = 1e-9) -> float:
    """The share of positions whose inferred geometric mean is at least the actual one (within
    `rel_tol`: the actual order found again scores equal up to rounding)."""
    a, b = np.asarray(actual, dtype=np.float64), np.asarray(inferred, dtype=np.float64)
    if len(a) == 0:
        return math.nan
    return float(np.mean(b >= a * (1.0 - rel_tol)))


def figures(rows: Sequence[dict]) -> dict:
    """The paper's figures over the rows of one set and configuration."""
    if not rows:
        return {"positions": 0}
    actual = [r["actual_gm"] for r in rows]
    inferred = [r["inferred_gm"] for r in rows]
    greedy = [r["greedy_gm"] for r in rows]
    return {
        "positions": len(rows),
        "share_at_least_actual": share_at_least(actual, inferred),
        "slope": slope_through_origin(actual, inferred),
        "exact": float(np.mean([r["exact"] for r in rows])),
        # another order at least as likely as the actual one (`share_at_least`'s rounding): the
        # actual order is not the network's one most likely, so no search on this network can
        # be sure to match it (an exact match scores a few 1e-8 apart through float32 outputs)
        "actual_beaten": float(np.mean([not r["exact"] and r["inferred_gm"] >= r["actual_gm"]
                                        * (1.0 - 1e-9) for r in rows])),
        "actual_top1": float(np.mean([r.get("actual_top1", math.nan) for r in rows])),
        "move_match": float(np.mean([r["move_match"] for r in rows])),
        "spread": float(np.mean([r["spread"] for r in rows])),
        "greedy_share_at_least_actual": share_at_least(actual, greedy),
        "greedy_slope": slope_through_origin(actual, greedy),
        "greedy_move_match": float(np.mean([r["greedy_move_match"] for r in rows])),
        "actual_gm": float(np.mean(actual)), "inferred_gm": float(np.mean(inferred)),
        "seconds": float(np.mean([r["seconds"] for r in rows])),
        "cpu_seconds": float(np.mean([r.get("cpu_seconds", math.nan) for r in rows])),
        "boards": float(np.mean([r["boards"] for r in rows])),
    }
