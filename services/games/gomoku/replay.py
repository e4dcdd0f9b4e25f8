"""Turn a game's move list into (position, next move) pairs by replaying it under the rules.

A move the rules refuse ends the game's pairs there; the caller gets the reason so the record
can be quarantined instead of silently producing bad positions.

Under renju rules a black move on a forbidden point (overline, double-four, double-three)
is not a refused record but the end of a valid game (the player lost by it, and records keep
it): the game's pairs end before that move, the move itself is no target, and the game comes
with a `cut` note (`FORBIDDEN_CUT`) instead of an error.

`replay` is the plain per-move replay of one game. `replay_games` does many games at once and
gives exactly what `replay` gives for each, without replaying move by move: a game replays
cleanly when its moves are on the board, all different, and no line of five or more stones
of one colour is on the board before its last move (checked on bit rows for all games
together); a renju game is first cut after its first forbidden black move
(`renju.first_forbidden_games`), and when it passes that test it reaches that move, where its
pairs end. Only the games that fail the test (a handful in real data) are handed to
`replay` for the exact reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np
import pyarrow as pa

from services.games import pair_tables
from services.games.base import SourceResult, quarantine_row
from services.games.canonical import canonical_pairs
from services.games.gomoku.renju import first_forbidden_games
from services.games.gomoku.rules import (  # FORBIDDEN_CUT: what the notes of cut games start with
    BLACK,
    CUT_NOTE,
    DEFAULT_SIZE,
    FORBIDDEN_CUT,
    WHITE,
    ForbiddenMove,
    GomokuState,
    IllegalMove,
    Rule,
    game_rule,
)
from services.games.pair_tables import mover_results, raw_pairs_table
from services.records.rif import Rejected, RifGame, read_rif
from services.step_times import step

BOARD_SIZE = DEFAULT_SIZE  # RenjuNet records: Gomoku/Renju on 15x15
# moves per block of whole games in suspect_games: its scratch arrays stay small (in cache)
_SUSPECT_MOVES = 1 << 15


@dataclass(frozen=True)
class GamePairs:
    boards: np.ndarray  # int8 [n, size*size], the position before each move
    moves: np.ndarray  # int16 [n], the move played
    to_move: np.ndarray  # int8 [n], BLACK or WHITE
    plies: np.ndarray  # int16 [n], 0-based move number
    error: str | None  # why the replay stopped early, None when the whole game was legal
    cut: str | None = None  # FORBIDDEN_CUT note: the pairs end at a forbidden black move


@dataclass(frozen=True)
class ReplayedGames:
    """Many games replayed: game g contributes its first `legal[g]` moves as pairs."""

    moves: np.ndarray  # int16 [sum(legal)], the legal moves of every game, back to back
    legal: np.ndarray  # int64 [games], how many moves of each game were legal
    errors: list[str | None]  # per game, what `replay` reports as the error
    cuts: list[str | None]  # per game, what `replay` reports as the cut

    @property
    def plies(self) -> np.ndarray:
        """int16 [sum(legal)]: 0-based move number of each pair."""
        return game_plies(self.legal)


def game_plies(lengths: np.ndarray) -> np.ndarray:
    """int16 [sum(lengths)]: 0, 1, ... along each game of the given lengths (< 2**15)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    lengths = lengths[lengths > 0]
    steps = np.ones(int(lengths.sum()), dtype=np.int16)  # a running count, restarted at
    if len(steps):  # each game's first move by a step back over the previous game
        steps[0] = 0
        steps[np.cumsum(lengths[:-1])] = 1 - lengths[:-1]
    return np.cumsum(steps, dtype=np.int16)


def forbidden_cut(ply: int, exc: ForbiddenMove) -> str:
    """The note of a game cut at the forbidden move at 0-based `ply`."""
    return f"{FORBIDDEN_CUT}{exc} at ply {ply + 1} (pairs kept up to move {ply})"


def replay(moves: tuple[int, ...] | list[int], size: int = 15,
           rule: Rule = Rule.FREESTYLE) -> GamePairs:
    state = GomokuState(size=size, rule=rule)
    error = cut = None
    legal = 0
    for i, point in enumerate(moves):
        try:
            state = state.play(point)
        except ForbiddenMove as exc:
            cut = forbidden_cut(i, exc)
            break
        except IllegalMove as exc:
            error = f"illegal move at ply {i + 1}: {exc}"
            break
        legal += 1
    played = np.asarray(moves[:legal], dtype=np.int16)
    colors = np.where(np.arange(legal) % 2 == 0, BLACK, WHITE).astype(np.int8)
    # boards[i] holds every stone played before ply i: stone j is present in rows i > j.
    boards = np.zeros((legal, size * size), dtype=np.int8)
    if legal:
        later = np.arange(legal)[:, None] > np.arange(legal)[None, :]  # [ply, stone]
        rows, stones = np.nonzero(later)
        boards[rows, played[stones]] = colors[stones]
    return GamePairs(boards, played, colors, np.arange(legal, dtype=np.int16), error, cut)


def replay_games(games: Sequence[Sequence[int]], size: int = 15,
                 rule: Rule | Sequence[Rule] = Rule.FREESTYLE) -> ReplayedGames:
    """`replay` of every game, as one batch: same legal prefixes, same errors and cuts.

    `rule`: one rule for every game, or each game's own (a sequence as long as `games`).
    """
    rules = [rule] * len(games) if isinstance(rule, Rule) else list(rule)
    if len(rules) != len(games):
        raise ValueError(f"{len(rules)} rules for {len(games)} games")
    found: dict[int, tuple[int, str]] = {}  # renju games: (ply, reason) of a forbidden move
    if Rule.RENJU in rules:
        games = list(games)
        renju_games = [g for g, r in enumerate(rules) if r is Rule.RENJU]
        firsts = first_forbidden_games([games[g] for g in renju_games], size)
        for g, forbidden in zip(renju_games, firsts, strict=True):
            if forbidden is not None:  # kept up to and with it: the test below then says
                found[g] = forbidden  # whether the game gets there
                games[g] = games[g][:forbidden[0] + 1]
    lengths = np.fromiter((len(g) for g in games), dtype=np.int64, count=len(games))
    flat = np.fromiter(chain.from_iterable(games), dtype=np.int64, count=int(lengths.sum()))
    suspect = suspect_games(flat, lengths, size)
    ends: dict[int, tuple[int, str | None, str | None]] = {}  # game: legal moves, error, cut
    for g in np.flatnonzero(suspect).tolist():  # replayed move by move
        game = replay(list(games[g]), size, rules[g])
        ends[g] = len(game.moves), game.error, game.cut
    for g, (ply, reason) in found.items():  # the others reach their forbidden move
        if g not in ends:
            exc = ForbiddenMove(int(games[g][ply]), size, reason)
            ends[g] = ply, None, forbidden_cut(ply, exc)
    legal = lengths.copy()
    errors: list[str | None] = [None] * len(games)
    cuts: list[str | None] = [None] * len(games)
    keep = None
    starts = np.cumsum(lengths) - lengths
    for g, (n, error, cut) in ends.items():
        legal[g], errors[g], cuts[g] = n, error, cut
        if legal[g] < lengths[g]:
            if keep is None:
                keep = np.ones(len(flat), dtype=bool)
            keep[starts[g] + legal[g]: starts[g] + lengths[g]] = False
    return ReplayedGames((flat if keep is None else flat[keep]).astype(np.int16), legal, errors,
                         cuts)


def suspect_games(moves: np.ndarray, lengths: np.ndarray, size: int = 15) -> np.ndarray:
    """bool [games]: False guarantees the game replays without error under freestyle and
    standard rules, and under renju rules when it holds no forbidden black move (moves on the
    board and all different, no five or longer line of one colour before the last move); True
    means it has to be replayed to find out."""
    moves = np.asarray(moves, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    suspect = np.zeros(len(lengths), dtype=bool)
    ends = np.cumsum(lengths)
    g0 = 0
    while g0 < len(lengths):  # blocks of whole games, about _SUSPECT_MOVES moves each
        m0 = int(ends[g0] - lengths[g0])
        g1 = max(g0 + 1, int(np.searchsorted(ends, m0 + _SUSPECT_MOVES, side="right")))
        suspect[g0:g1] = _suspect_block(moves[m0:int(ends[g1 - 1])], lengths[g0:g1], size)
        g0 = g1
    return suspect


def _suspect_block(moves: np.ndarray, lengths: np.ndarray, size: int) -> np.ndarray:
    """`suspect_games` of the games of one block."""
    n_games, cells = len(lengths), size * size
    if len(moves) == 0:
        return np.zeros(n_games, dtype=bool)
    off_board = (moves < 0) | (moves >= cells)
    point = np.where(off_board, 0, moves) if off_board.any() else moves
    game = np.repeat(np.arange(n_games), lengths)
    suspect = np.bincount(game[off_board], minlength=n_games) > 0
    starts = np.cumsum(lengths) - lengths
    odd = (np.arange(len(moves)) - np.repeat(starts, lengths)) & 1  # White's moves
    # bit rows per (game, colour, row y): bit x set for a stone at (x, y)
    ys, xs = np.divmod(np.arange(cells), size)
    slot = (game * 2 + odd) * size + ys[point]
    bit = np.ldexp(1.0, xs)[point]  # exact in float64 (size <= 19 bits)
    rows = np.bincount(slot, weights=bit, minlength=n_games * 2 * size)
    stones = np.bincount(slot, minlength=n_games * 2 * size)
    # a point played twice: the bits of a (game, y) summed over both colours are no longer
    # the bits or-ed, so their popcount falls short of the stone count
    both = rows.reshape(n_games, 2, size).sum(axis=1)
    repeated = _popcount(both.astype(np.uint32)) != stones.reshape(n_games, 2, size).sum(axis=1)
    suspect |= repeated.any(axis=1)
    # fives: the same bit rows without each game's last move
    last_row = (np.cumsum(lengths) - 1)[lengths > 0]
    rows[slot[last_row]] -= bit[last_row]
    suspect |= _has_five(rows.astype(np.uint32).reshape(n_games, 2, size))
    return suspect


def _popcount(v: np.ndarray) -> np.ndarray:
    v = v - ((v >> 1) & 0x55555555)
    v = (v & 0x33333333) + ((v >> 2) & 0x33333333)
    v = (v + (v >> 4)) & 0x0F0F0F0F
    return ((v * 0x01010101) & 0xFFFFFFFF) >> 24


def _has_five(rows: np.ndarray) -> np.ndarray:
    """bool [games] from uint32 bit rows [games, colours, size] (bit x of row y = stone)."""
    found = np.zeros(rows.shape[0], dtype=bool)
    horizontal = rows & (rows >> 1) & (rows >> 2) & (rows >> 3) & (rows >> 4)
    found |= horizontal.any(axis=(1, 2))
    span = rows.shape[2] - 4
    if span <= 0:
        return found
    lines = [rows[..., k:k + span] for k in range(5)]
    vertical = lines[0] & lines[1] & lines[2] & lines[3] & lines[4]
    rising = lines[0] & (lines[1] >> 1) & (lines[2] >> 2) & (lines[3] >> 3) & (lines[4] >> 4)
    falling = lines[0] & (lines[1] << 1) & (lines[2] << 2) & (lines[3] << 3) & (lines[4] << 4)
    found |= (vertical | rising | falling).any(axis=(1, 2))
    return found


def _move_snippet(moves) -> str:
    return " ".join(str(m) for m in moves[:40])


def source_pairs(source: str, records: Iterable[RifGame | Rejected],
                 result: SourceResult | None = None) -> SourceResult:
    """Every record's raw canonical pairs (one row per occurrence, the intermediate layout
    without the `rule` column) and the source's bookkeeping, replayed together as one batch
    (`replay_games`, `canonical_pairs`): rejected records and refused games quarantined in
    record order, renju games cut at a forbidden move kept with a `cut_at_forbidden` note.
    Counted into `result` when given (the ingest's), else into a new one."""
    result = result or SourceResult(source=source)
    result.pairs = pa.table({})
    games: list[tuple[int, ...]] = []
    game_ids: list[str] = []
    bresults: list[float] = []  # Black's result per game, NaN unknown
    rules: list[Rule] = []  # each game's own (renju: forbidden moves end it)
    rejected_before: list[int] = []  # per game: quarantine rows of earlier Rejected records
    with step("pairs: collect records"):
        for record in records:
            result.read += 1
            if isinstance(record, Rejected):
                result.quarantine.append(
                    quarantine_row(source, record.record_id, record.reason, record.snippet))
                continue
            games.append(record.moves)
            game_ids.append(record.game_id)
            bresults.append(np.nan if record.bresult is None else record.bresult)
            rules.append(game_rule(record.rule))
            rejected_before.append(len(result.quarantine))
    with step("pairs: replay (legality)"):
        replayed = replay_games(games, BOARD_SIZE, rules)
    ok = np.fromiter((e is None for e in replayed.errors), dtype=bool, count=len(games))
    noted = [g for g, c in enumerate(replayed.cuts) if c is not None]
    if noted:
        result.notes[CUT_NOTE] = len(noted)
    if not ok.all() or noted:  # quarantine rows in record order, as one by one gives them
        rejected, merged, done = result.quarantine, [], 0
        for g in sorted([*np.flatnonzero(~ok).tolist(), *noted]):
            merged.extend(rejected[done:rejected_before[g]])
            done = rejected_before[g]
            merged.append(quarantine_row(source, game_ids[g],
                                         replayed.errors[g] or replayed.cuts[g],
                                         _move_snippet(games[g])))
        result.quarantine = merged + rejected[done:]
    result.ingested = int(ok.sum())
    if ok.all():
        lengths, moves = replayed.legal, replayed.moves
    else:
        lengths = np.where(ok, replayed.legal, 0)
        moves = replayed.moves[np.repeat(ok, replayed.legal)]
    plies = game_plies(lengths)
    with step("pairs: hash + canonical boards"):
        boards, canon_moves, hashes = canonical_pairs(moves, lengths, BOARD_SIZE)
    with step("pairs: Arrow table"):
        game_of_row = np.repeat(np.arange(len(games), dtype=np.int32), lengths)
        ids = pa.array(game_ids, pa.string()).take(pa.array(game_of_row, pa.int32()))
        result.pairs = raw_pairs_table(
            boards, canon_moves, (plies % 2 + 1).astype(np.int8), plies, hashes, ids, source,
            mover_results(np.asarray(bresults, np.float32)[game_of_row], plies), BOARD_SIZE)
    return result


def pairs_table(boards: np.ndarray, moves: np.ndarray, to_move: np.ndarray, plies: np.ndarray,
                game_ids: list[str], source: str,
                results: np.ndarray | None = None) -> pa.Table:
    """Canonical raw pairs of 15x15 boards (`pair_tables.pairs_table`)."""
    return pair_tables.pairs_table(boards, moves, to_move, plies, game_ids, source, results,
                                   size=BOARD_SIZE)


def replay_source(path: Path, result: SourceResult) -> Iterator[pa.Table]:
    """`GomokuGame.replay_source`: a RenjuNet file's pairs (`source_pairs`) with each row's
    rule name as the record gives it (the `rule` column), as one table."""
    rules: dict[str, str] = {}

    def records() -> Iterator[RifGame | Rejected]:
        for record in read_rif(path, source=result.source):
            if isinstance(record, RifGame):
                rules[record.game_id] = record.rule
            yield record

    pairs = source_pairs(result.source, records(), result).pairs
    ids = pairs["game_id"].to_pylist() if pairs.num_rows else []
    yield pairs.append_column("rule", pa.array([rules.get(i, "") for i in ids], pa.string()))
