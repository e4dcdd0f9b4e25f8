"""A self-play folder as an ingest source: its games -> raw pairs with targets and lineage.

A self-play folder (`records`: `games/<game_id>.json` per finished game, `records/` beside)
is one source of the ingest flow, as a record file is. Each game goes through the game's own
path twice over:

1. its moves are played on `Game.start(size)` one by one (the rules refuse an illegal move:
   the game is quarantined), which also gives every position's raw network input;
2. the game's record text (`Game.record_text`, the format `records.record_suffix` names) is
   replayed by `Game.replay_source`, the very replay a record file of the game goes through:
   the rows have the layout, the canonical symmetry images and the board encoding of the
   records' pairs (once as network inputs, to compare, once as the shards store them).

A row is one searched position: the opening's positions (played from the opening suite, not
chosen by a search) are left out. Each row's symmetry image is recovered by comparing its raw
input with the canonical one (the smallest symmetry that gives the canonical board and move:
the one the canonical choice takes among equal images), and the full search's visit counts are
moved with the same point table (`policy_target`, dense over the game's policy points, a pass
unmoved; null on a fast-search row). The value target is the `result` column, the mover's
result of the game (1 won, 0 lost, 0.5 a draw or a game without a result), and the lineage
columns (`services.dataset.shards.SELFPLAY_COLUMNS`) say which network, search and seed made
it. A game file that cannot be read or replayed is quarantined with its reason; the others are
unaffected.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from services.checksums import sha256_file
from services.dataset.shards import POLICY_TARGET, SELFPLAY_COLUMNS
from services.dataset.sources import write_pairs
from services.games.base import BLACK, WHITE, Game, SourceResult, quarantine_row
from services.games.symmetry import N_SYMMETRIES, point_table, transform_board
from services.selfplay.game_record import SelfPlayGame
from services.selfplay.records import GAMES_DIR, from_json, record_suffix

log = logging.getLogger(__name__)

_TYPES = dict(SELFPLAY_COLUMNS)


class GameRefused(ValueError):
    """A game file that gives no rows; the message is its quarantine reason."""


def is_selfplay_source(path: str | Path) -> bool:
    """Whether `path` is a self-play folder (one holding a `games/` folder)."""
    return (Path(path) / GAMES_DIR).is_dir()


def game_files(folder: str | Path) -> list[Path]:
    """The finished games' files of a self-play folder, by name."""
    return sorted((Path(folder) / GAMES_DIR).glob("*.json"))


def folder_fingerprint(folder: str | Path) -> str:
    """SHA-256 over the names and SHA-256s of the folder's game files: what the ingest's cache
    keys a self-play source by (a new or changed game is a new fingerprint)."""
    digest = hashlib.sha256()
    for path in game_files(folder):
        digest.update(f"{path.name}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def folder_game(folder: str | Path) -> str | None:
    """The registered name of the game the folder's first readable game file names."""
    for path in game_files(folder):
        try:
            name = json.loads(path.read_text(encoding="utf-8")).get("game")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            continue
        if isinstance(name, str):
            return name
    return None


def move_table(game: Game, size: int) -> np.ndarray:
    """int64 [8, policy points]: where symmetry k takes each policy entry (a board point by
    `point_table`; an entry past the board, the pass, to itself)."""
    points = size * size
    extra = np.arange(points, game.policy_size(size), dtype=np.int64)
    table = point_table(size).astype(np.int64)
    return np.concatenate([table, np.broadcast_to(extra, (N_SYMMETRIES, len(extra)))], axis=1)


def dense_target(target: tuple[tuple[int, int], ...], points: int) -> np.ndarray:
    """int32 [points]: the (move, visits) pairs of a full search as visit counts per entry."""
    out = np.zeros(points, np.int32)
    for move, visits in target:
        if not 0 <= move < points or visits < 0:
            raise GameRefused(f"target entry ({move}, {visits}) outside the policy's "
                              f"{points} entries")
        out[move] += visits
    return out


def _raw_positions(game: Game, record: SelfPlayGame) -> tuple[np.ndarray, np.ndarray]:
    """(network inputs int8 [n, *input_shape], movers int8 [n]) of the searched positions,
    the moves played by the rules from the empty board (an illegal one refuses the game)."""
    state = game.start(record.size)
    inputs, movers = [], []
    start = len(record.opening)
    for ply, move in enumerate(record.all_moves):
        if ply >= start:
            inputs.append(np.asarray(game.network_input(state), np.int8))
            movers.append(state.to_move)
        legal = np.asarray(state.legal_mask()).reshape(-1)
        if state.is_over or not 0 <= move < len(legal) or not legal[move]:
            raise GameRefused(f"illegal move {move} at ply {ply + 1}")
        try:
            state = state.play(move)
        except Exception as exc:  # the rules' own refusal, whatever its type
            raise GameRefused(f"illegal move {move} at ply {ply + 1}: {exc}") from exc
    shape = game.input_shape(record.size)
    return (np.stack(inputs) if inputs else np.zeros((0, *shape), np.int8),
            np.asarray(movers, np.int8))


def _replayed(game: Game, record: SelfPlayGame, work: Path, name: str,
              board_size: int | None, packed: bool) -> pa.Table:
    """The game's rows as `Game.replay_source` gives them for its record text, the opening's
    positions left out."""
    suffix = record_suffix(game)
    path = work / f"game{suffix}"
    path.write_text(game.record_text(suffix, record.all_moves, record.size), encoding="utf-8")
    inner = SourceResult(source=name)
    tables = list(game.replay_source(path, inner, board_size=board_size, packed=packed))
    if inner.quarantine:
        raise GameRefused(inner.quarantine[0]["reason"])
    table = pa.concat_tables(tables)
    moves = len(record.all_moves)
    if inner.ingested != 1 or table.num_rows != moves:
        raise GameRefused(f"the record replays to {table.num_rows} positions, not {moves}")
    plies = table["ply"].to_numpy()
    if not np.array_equal(plies, np.arange(moves)):
        raise GameRefused("the record's positions are not in move order")
    return table.slice(len(record.opening))


def _images(raw: np.ndarray, moves: np.ndarray, canonical: np.ndarray,
            canonical_moves: np.ndarray, table: np.ndarray) -> np.ndarray:
    """int64 [n]: per row the smallest symmetry k that takes the raw input and move to the
    canonical ones (the one the canonical choice takes among equal images)."""
    n = len(moves)
    flat = canonical.reshape(n, -1)
    chosen = np.full(n, -1, np.int64)
    for k in range(N_SYMMETRIES):
        same = (transform_board(raw, k).reshape(n, -1) == flat).all(axis=1)
        same &= table[k, moves] == canonical_moves
        chosen = np.where((chosen < 0) & same, k, chosen)
    if (chosen < 0).any():
        ply = int(np.flatnonzero(chosen < 0)[0])
        raise GameRefused(f"the replayed position {ply} is no symmetry image of the played one")
    return chosen


def game_table(game: Game, record: SelfPlayGame, game_id: str, name: str, work: Path, *,
               board_size: int | None = None) -> pa.Table:
    """The raw pairs of one self-play game (the intermediate layout of the game's records'
    pairs, plus `SELFPLAY_COLUMNS`); GameRefused with the reason it cannot be ingested."""
    if record.game != game.name:
        raise GameRefused(f"a {record.game!r} game in a {game.name} self-play folder")
    if board_size is not None and record.size != board_size:
        raise GameRefused(f"board size {record.size} (this dataset holds "
                          f"{board_size}x{board_size} games)")
    if record.winner not in (0, BLACK, WHITE):
        raise GameRefused(f"winner {record.winner} is no colour")
    raw, movers = _raw_positions(game, record)
    played = np.asarray([m.move for m in record.moves], np.int64)
    plain = _replayed(game, record, work, name, board_size, packed=False)
    stored = _replayed(game, record, work, name, board_size, packed=True)
    canonical_moves = plain["move"].to_numpy().astype(np.int64)
    if not (np.array_equal(canonical_moves, stored["move"].to_numpy().astype(np.int64))
            and plain["position_hash"].equals(stored["position_hash"])):
        raise GameRefused("the record's two replays disagree")
    n, shape = len(played), game.input_shape(record.size)
    canonical = np.frombuffer(b"".join(plain["board"].to_pylist()), np.int8)
    if canonical.size != n * int(np.prod(shape)):
        raise GameRefused("the replayed boards are not the game's network inputs")
    table = move_table(game, record.size)
    images = _images(raw, played, canonical.reshape(n, *shape), canonical_moves, table)
    points = game.policy_size(record.size)
    targets: list[list[int] | None] = []
    for k, move in zip(images.tolist(), record.moves, strict=True):
        if not move.full:
            targets.append(None)
            continue
        image = np.zeros(points, np.int32)
        image[table[k]] = dense_target(move.target, points)
        targets.append(image.tolist())
    results = np.where(record.winner == 0, 0.5, (movers == record.winner).astype(np.float32))
    columns = {
        "result": pa.array(results.astype(np.float32), pa.float32()),
        "game_id": pa.array([game_id] * n, pa.string()),
        "source": pa.array([name] * n, pa.string()),
    }
    for column, values in columns.items():
        stored = stored.set_column(stored.column_names.index(column), column, values)
    lineage = {
        POLICY_TARGET: targets,
        "full": [m.full for m in record.moves],
        "visits": [m.visits for m in record.moves],
        "model_name": [record.model_name] * n,
        "model_version": [record.model_version] * n,
        "seed": [record.seed] * n,
        "opening": [list(record.opening)] * n,
    }
    for column, values in lineage.items():
        stored = stored.append_column(column, pa.array(values, _TYPES[column]))
    return stored


def _empty_table(game: Game, name: str, work: Path, board_size: int | None) -> pa.Table:
    """No rows, in the layout a game's rows have (a source without an ingestible game)."""
    size = board_size or game.default_size
    record = SelfPlayGame(game.name, size, 0, (), False)
    replayed = _replayed(game, record, work, name, board_size, packed=True)
    for column, kind in SELFPLAY_COLUMNS:
        replayed = replayed.append_column(column, pa.array([], kind))
    return replayed


def selfplay_tables(game: Game, folder: str | Path, result: SourceResult, *,
                    board_size: int | None = None) -> Iterator[pa.Table]:
    """The rows of every game file of `folder` in name order (at least one table), counted
    into `result`: read = ingested + quarantined, a game file that cannot be read or replayed
    quarantined with its reason."""
    name = result.source
    with tempfile.TemporaryDirectory(prefix="selfplay-replay-") as tmp:
        work = Path(tmp)
        yielded = False
        for path in game_files(folder):
            result.read += 1
            game_id = path.stem
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                record = from_json(data)
                if data.get("game_id", game_id) != game_id:
                    raise ValueError(f"its game_id {data['game_id']!r} is not its file name")
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                result.quarantine.append(quarantine_row(
                    name, game_id, f"unreadable game file: {exc}"))
                continue
            try:
                table = game_table(game, record, game_id, name, work, board_size=board_size)
            except GameRefused as exc:
                result.quarantine.append(quarantine_row(
                    name, game_id, str(exc), " ".join(map(str, record.all_moves[:40]))))
                continue
            result.ingested += 1
            yielded = True
            yield table
        if not yielded:
            yield _empty_table(game, name, work, board_size)


def selfplay_pairs(game: Game, folder: str | Path, name: str | None = None, *,
                   board_size: int | None = None) -> SourceResult:
    """Every row of a self-play folder in memory (`result.pairs`, one table)."""
    folder = Path(folder)
    result = SourceResult(source=name or folder.name)
    result.pairs = pa.concat_tables(selfplay_tables(game, folder, result,
                                                    board_size=board_size))
    result.rows = result.pairs.num_rows
    return result


def write_selfplay_pairs(game: Game, folder: str | Path, out: str | Path,
                         name: str | None = None, *,
                         board_size: int | None = None) -> SourceResult:
    """The self-play folder's rows written to the Parquet intermediate `out`
    (`services.dataset.sources.write_pairs`: atomic, with its row count and SHA-256)."""
    folder = Path(folder)
    result = SourceResult(source=name or folder.name)
    return write_pairs(selfplay_tables(game, folder, result, board_size=board_size), out,
                       result)


__all__ = ["GameRefused", "dense_target", "folder_fingerprint", "folder_game", "game_files",
           "game_table", "is_selfplay_source", "move_table", "selfplay_pairs",
           "selfplay_tables", "write_selfplay_pairs"]
