"""Prefect flow `infer`: the likeliest move order of every position of a collection.

Each position's stones are sent to the search service's `InferSequence` (greedy order, then
simulated annealing over orders; Hsueh & Ikeda 2023) and the inferred game is written under
`out/`, with one row per position in `out/summary.csv`.

Run: python -m flows.infer SOURCES ... --out artifacts/inferred --target 127.0.0.1:50051
         [--moves 20] [--iterations N] [--restarts N] [--limit N]

Sources:

* game records: `.sgf` (Go) and `.rif` / `.rif.gz` (RenjuNet, Gomoku under each game's rule;
  the suffix names the game, `Game.record_formats`). Each game gives the position after its
  first `moves` moves, whose actual order is then known and compared with the inferred one.
  A game gives none, and is counted by reason, when it is shorter, or (Go, whose order can
  only be inferred for stones never removed and played alternately from the empty board) has
  a handicap or set-up stones, a pass, two moves of one colour in a row, an illegal move or a
  capture in those moves;
* `.jsonl` files of stone sets, one JSON object a line: `black` and `white` (names in the
  game's notation, or [x, y] pairs), optional `id`, `game` (default: the flow's `game`, else
  the registry's default game), `board_size`, `rule` (a Gomoku rule's name) and `order` (the
  actual order, when known, as names or pairs, black first).

How a run goes:

1. the positions are read from every source, the first `limit` kept;
2. positions whose id is already in `out/summary.csv` as answered (an order, or the service's
   INVALID_ARGUMENT) for the same request (stones and budget: its `request` column) are not
   run again: a run stopped half way is resumed by running it again, and a rerun with other
   moves, budget or seed runs every position anew (as does a summary written before rows
   named their request);
3. one `infer-position` task per position, at most `concurrency` at a time. A call the
   service answers UNAVAILABLE (Triton or the service down), RESOURCE_EXHAUSTED (every search
   slot busy) or DEADLINE_EXCEEDED is retried after a delay; INVALID_ARGUMENT (stones no game
   reaches: wrong counts, no legal order) is the position's answer, recorded with its message,
   never retried. Each finished position is appended to `summary.csv` at once and advances a
   progress artifact;
4. the inferred games are written in the game's own record format (the first of its
   `record_formats` that it writes, else the first it writes: SGF for Go, RIF for Gomoku),
   each move's probability as its comment; `summary.csv` is rewritten with one row per
   position; a markdown artifact holds the counts and the table of positions.

The run fails only when every position it ran failed for an infrastructure reason (the service
or Triton unreachable through every retry): one bad position never stops a collection.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import io
import json
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    update_progress_artifact,
)
from prefect.futures import PrefectFuture, as_completed

from flows import announce_prefect_api, configure_logging
from services import logs
from services.atomic_files import atomic_write_text
from services.defaults import SEARCH_TARGET
from services.games.base import Game
from services.games.go.rules import replay as go_replay
from services.games.gomoku.rules import game_rule
from services.games.registry import default_game, game_of_source, get_game
from services.records.rif import RIF_SUFFIXES, RifGame, read_rif
from services.records.sgf import SgfGame, read_sgf
from services.search.auth import DEFAULT_TOKEN_ENV, ClientAuth, token_from
from services.search.client import SearchClient, proto_rule

JSONL_SUFFIX = ".jsonl"
SUMMARY = "summary.csv"
COLUMNS = ("position_id", "source", "game", "board_size", "stones", "status",
           "geometric_mean", "greedy_geometric_mean", "exact_match", "move_match_rate",
           "restarts_min", "restarts_max", "restarts_std", "seconds", "record", "message",
           "request")
OK, INVALID, FAILED = "ok", "invalid", "failed"
ANSWERED = frozenset({OK, INVALID})  # statuses a resumed run does not run again
# codes a later call may not get: the service or Triton down, every search slot busy, a call
# that ran out of time on a loaded service
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                       grpc.StatusCode.DEADLINE_EXCEEDED})
DEFAULT_MOVES = 20
DEFAULT_RETRIES = 3
DEFAULT_RETRY_DELAY_S = 2.0
TABLE_ROWS = 200  # positions listed in the markdown artifact

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class InferPosition:
    """One position to order: its stones as names in its game's notation or (x, y) pairs,
    and, when known, the order they were actually played in (black first)."""

    position_id: str
    source: str
    game: str  # the registered name, carried into the task (a Game is asked, never compared)
    board_size: int
    black: tuple[Any, ...]
    white: tuple[Any, ...]
    rule: str = ""  # a Gomoku rule's name; "" for the game's default
    actual: tuple[tuple[int, int], ...] | None = None  # (x, y) of each move, when known

    @property
    def stones(self) -> int:
        return len(self.black) + len(self.white)

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self),
                "actual": None if self.actual is None else [list(p) for p in self.actual]}


@dataclasses.dataclass
class Collection:
    """The positions read from the sources and the games that gave none, by reason."""

    positions: list[InferPosition] = dataclasses.field(default_factory=list)
    skipped: Counter = dataclasses.field(default_factory=Counter)


# ------------------------------------------------------------------------- reading sources
def record_suffix(game: Game) -> str:
    """The suffix an inferred game of `game` is written with: the first of its record formats
    that it writes (its own archive format), else the first format it writes."""
    own = [s for s in game.record_formats if s in game.written_formats]
    if own:
        return own[0]
    if not game.written_formats:
        raise ValueError(f"{game.title} games have no record format to write")
    return game.written_formats[0]


def _xy(game: Game, point: int, size: int) -> tuple[int, int]:
    p = game.move_point(point, size)
    return (p.x, p.y)


def _rif_positions(path: Path, source: str, moves: int, found: Collection) -> None:
    game = game_of_source(str(path))
    assert game is not None  # the suffix was checked
    size = game.default_size
    index = 0
    for record in read_rif(path, source=source):
        if not isinstance(record, RifGame):
            found.skipped["unreadable record"] += 1
            continue
        position_id = f"{source}:{index}"
        index += 1
        if len(record.moves) < moves:
            found.skipped[f"shorter than {moves} moves"] += 1
            continue
        played = record.moves[:moves]
        found.positions.append(InferPosition(
            position_id, source, game.name, size,
            tuple(game.move_name(p, size) for p in played[0::2]),
            tuple(game.move_name(p, size) for p in played[1::2]),
            rule=game_rule(record.rule).value,
            actual=tuple(_xy(game, p, size) for p in played)))


def _go_skip_reason(record: SgfGame, moves: int) -> str | None:
    """Why a Go record's first `moves` moves give no position to order, or None."""
    if len(record.moves) < moves:
        return f"shorter than {moves} moves"
    if record.handicap or record.setup_black or record.setup_white:
        return "handicap or set-up stones"
    played = record.moves[:moves]
    if any(p is None for _, p in played):
        return "a pass"
    if [c for c, _ in played] != [1 + i % 2 for i in range(moves)]:
        return "colours not alternating from black"
    return None


def _sgf_positions(path: Path, source: str, moves: int, found: Collection) -> None:
    game = game_of_source(str(path))
    assert game is not None
    index = 0
    for record in read_sgf(path, source=source):
        if not isinstance(record, SgfGame):
            found.skipped["unreadable record"] += 1
            continue
        position_id = f"{source}:{index}"
        index += 1
        reason = _go_skip_reason(record, moves)
        if reason is None:
            cut = dataclasses.replace(record, moves=record.moves[:moves])
            replayed = go_replay(cut, keep_states=False)
            if replayed.error:
                reason = "an illegal move"
            else:
                board = replayed.states[-1].board
                if int((board != 0).sum()) != moves:  # a stone was removed
                    reason = "a capture"
        if reason is not None:
            found.skipped[reason] += 1
            continue
        played = [p for _, p in record.moves[:moves]]
        size = record.size
        found.positions.append(InferPosition(
            position_id, source, game.name, size,
            tuple(game.move_name(p, size) for p in played[0::2]),
            tuple(game.move_name(p, size) for p in played[1::2]),
            actual=tuple(_xy(game, p, size) for p in played)))


def _stone(value: Any) -> Any:
    return value if isinstance(value, str) else tuple(int(v) for v in value)


def _jsonl_positions(path: Path, source: str, default: Game, found: Collection) -> None:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            game = get_game(item["game"]) if item.get("game") else default
            size = int(item.get("board_size") or game.default_size)
            black = tuple(_stone(s) for s in item["black"])
            white = tuple(_stone(s) for s in item["white"])
            actual = None
            if item.get("order") is not None:
                actual = tuple(_xy(game, game.parse_move(m, size), size) if isinstance(m, str)
                               else (int(m[0]), int(m[1])) for m in item["order"])
        except (ValueError, KeyError, TypeError) as exc:
            # a line that is no stone set at all: the service would have nothing to answer
            found.skipped["unreadable line"] += 1
            log.warning("%s line %d: %s", source, number, exc)
            continue
        found.positions.append(InferPosition(
            str(item.get("id") or f"{source}:{number}"), source, game.name, size, black, white,
            rule=str(item.get("rule") or ""), actual=actual))


def read_positions(sources: Sequence[str], moves: int, game: str | None = None) -> Collection:
    """Every position of the sources (records: after `moves` moves; JSONL: as given; `game`:
    the game of JSONL lines that name none), and the games that gave none, by reason.
    ValueError for a source of an unknown type, two sources of one name or a repeated id."""
    if moves < 1:
        raise ValueError(f"moves must be at least 1 (got {moves}): a record's position after "
                         "no moves has no stones to order")
    default = get_game(game) if game else default_game()
    found = Collection()
    paths = [Path(s) for s in sources]
    names = Counter(p.name for p in paths)
    clashes = sorted(n for n, k in names.items() if k > 1)
    if clashes:
        raise ValueError(f"source names must be unique (they name the positions): {clashes}")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"source file not found: {path}")
        lower = path.name.lower()
        if lower.endswith(JSONL_SUFFIX):
            _jsonl_positions(path, path.name, default, found)
        elif lower.endswith(RIF_SUFFIXES):
            _rif_positions(path, path.name, moves, found)
        elif lower.endswith(".sgf"):
            _sgf_positions(path, path.name, moves, found)
        else:
            raise ValueError(f"unknown source file type: {path}; accepted: .sgf (Go), "
                             f"{', '.join(RIF_SUFFIXES)} (RenjuNet), {JSONL_SUFFIX} (stone sets)")
    repeated = sorted(i for i, k in Counter(p.position_id for p in found.positions).items()
                      if k > 1)
    if repeated:
        raise ValueError(f"position ids must be unique (summary.csv is keyed by them): "
                         f"{repeated[:5]}")
    return found


# ------------------------------------------------------------------------------ summary
def request_key(position: InferPosition, budget: dict) -> str:
    """What a summary row answered: the position's stones, game, size and rule and the budget
    (the client's deadline aside), hashed. A resumed run keeps a row only for the same request:
    rerun with more moves, another budget or seed, a row's answer is not the one asked for."""
    asked = {"game": position.game, "board_size": position.board_size, "rule": position.rule,
             "black": [list(s) if isinstance(s, tuple) else s for s in position.black],
             "white": [list(s) if isinstance(s, tuple) else s for s in position.white],
             **{k: v for k, v in budget.items() if k != "timeout"}}
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]


def read_summary(path: Path) -> dict[str, dict[str, str]]:
    """The rows of a summary.csv by position id (the last row of an id wins); {} when none.
    A summary with other columns (an older version's) is rewritten with `COLUMNS`, its rows
    kept, so the rows appended after it line up with its header."""
    if not path.is_file():
        return {}
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = {row["position_id"]: row for row in reader}
        columns = tuple(reader.fieldnames or ())
    if rows and columns != COLUMNS:
        atomic_write_text(_csv_text(list(rows.values()), header=True), path)
    return rows


def _csv_text(rows: Sequence[dict], header: bool) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows({k: row.get(k, "") for k in COLUMNS} for row in rows)
    return buffer.getvalue()


def append_row(path: Path, row: dict) -> None:
    """Append one finished position at once, so a run stopped later keeps it (after
    `read_summary`, which gives the file these columns)."""
    header = not path.is_file() or path.stat().st_size == 0
    with path.open("a", newline="", encoding="utf-8") as f:
        f.write(_csv_text([row], header))
        f.flush()


def safe_name(position_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", position_id)


# -------------------------------------------------------------------------------- the task
class TransientRpcError(RuntimeError):
    """An InferSequence call that another try may answer (`TRANSIENT` codes)."""


def _retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a task only for a `TransientRpcError`: a bug or a bad answer is not retried."""
    try:
        state.result()
    except TransientRpcError:
        return True
    except Exception:  # any other failure is final
        return False
    return False


def _fmt(value: float) -> str:
    return f"{value:.6g}"


@task(name="infer-position", task_run_name="infer {position[position_id]}",
      retries=DEFAULT_RETRIES, retry_delay_seconds=DEFAULT_RETRY_DELAY_S,
      retry_condition_fn=_retry_transient)
def infer_position(position: dict, out_dir: str, target: str, client: dict,
                   budget: dict) -> dict:
    """One InferSequence call; the position's summary row, the inferred game written under
    `out_dir`. INVALID_ARGUMENT is an answer (the row says why); a `TRANSIENT` code raises
    `TransientRpcError` (retried); any other error fails the task."""
    p = InferPosition(**{**position, "actual": None if position["actual"] is None
                         else tuple(tuple(xy) for xy in position["actual"]),
                         "black": tuple(_stone(s) for s in position["black"]),
                         "white": tuple(_stone(s) for s in position["white"])})
    game = get_game(p.game)
    row: dict[str, Any] = {"position_id": p.position_id, "source": p.source, "game": game.name,
                           "board_size": p.board_size, "stones": p.stones}
    token = token_from(client.get("token_file"), client.get("token_env") or DEFAULT_TOKEN_ENV,
                       env_required=bool(client.get("token_env")))
    tls_ca, cert, key = (client.get(k) for k in ("tls_ca", "tls_client_cert", "tls_client_key"))
    auth = ClientAuth(tls=bool(client.get("tls") or tls_ca or cert or key),
                      tls_ca=Path(tls_ca) if tls_ca else None,
                      client_cert=Path(cert) if cert else None,
                      client_key=Path(key) if key else None, token=token,
                      server_name=client.get("tls_server_name"))
    started = time.perf_counter()
    try:
        with SearchClient(target, auth=auth,
                          wait_for_ready=bool(client.get("wait_for_ready"))) as search:
            reply = search.infer_sequence(
                list(p.black), list(p.white), game=game, rule=proto_rule(p.rule) if p.rule else 0,
                board_size=p.board_size, **budget)
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return {**row, "status": INVALID, "message": details,
                    "seconds": _fmt(time.perf_counter() - started)}
        if code in TRANSIENT:
            raise TransientRpcError(f"{code.name}: {details}") from exc
        raise
    seconds = time.perf_counter() - started
    points = [game.parse_move(m.name, p.board_size) for m in reply.moves]
    suffix = record_suffix(game)
    record = Path(out_dir) / f"{safe_name(p.position_id)}{suffix}"
    game.write_record(
        record, points, p.board_size, rule=p.rule or None,
        comments=[f"p={m.probability:.4g}" for m in reply.moves],
        summary=f"{p.position_id}: move order inferred by {reply.model_name} "
                f"v{reply.model_version}, geometric mean {reply.geometric_mean:.4g} "
                f"(greedy {reply.greedy_geometric_mean:.4g})")
    row.update(status=OK, geometric_mean=_fmt(reply.geometric_mean),
               greedy_geometric_mean=_fmt(reply.greedy_geometric_mean),
               restarts_min=_fmt(reply.restarts_min), restarts_max=_fmt(reply.restarts_max),
               restarts_std=_fmt(reply.restarts_std), seconds=_fmt(seconds),
               record=record.name,
               message="stopped by the time budget" if reply.stopped_early else "")
    if p.actual is not None:
        inferred = [(m.point.x, m.point.y) for m in reply.moves]
        matches = sum(a == b for a, b in zip(inferred, p.actual, strict=False))
        row["exact_match"] = "yes" if inferred == list(p.actual) else "no"
        row["move_match_rate"] = _fmt(matches / max(len(p.actual), 1))
    return row


# -------------------------------------------------------------------------------- the flow
def _budget(iterations: int | None, restarts: int | None, seed: int, time_ms: int | None,
            neighbour: str, init: str, timeout_s: float | None) -> dict:
    """InferSequence's budget fields (0 / "": the server's defaults, the paper's recipe)."""
    return {"iterations": iterations or 0, "restarts": restarts or 0, "seed": seed,
            "max_time_ms": time_ms or 0, "neighbour": neighbour, "init": init,
            "timeout": timeout_s}


@flow(name="infer")
def infer_flow(sources: list[str], out: str, target: str, moves: int = DEFAULT_MOVES,
               game: str | None = None, iterations: int | None = None,
               restarts: int | None = None, seed: int = 0, limit: int | None = None,
               time_ms: int | None = None, neighbour: str = "", init: str = "",
               timeout_s: float | None = None, concurrency: int = 1,
               retries: int = DEFAULT_RETRIES,
               retry_delay_s: float = DEFAULT_RETRY_DELAY_S,
               client: dict | None = None) -> dict:
    """Infer the move order of every position of `sources` through the search service at
    `target`; write the games and `summary.csv` into `out`. Returns the run's counts.

    `moves`: the position after that many moves of each record; `game`: the game of JSONL lines
    that name none; `iterations`, `restarts`, `time_ms`, `neighbour`, `init`: InferSequence's
    budget (None / "": the server's default, the paper's recipe), `seed` its seed; `limit`: the
    first that many positions; `concurrency`: calls in flight (the service answers
    RESOURCE_EXHAUSTED past its search slots, which is retried); `retries` and
    `retry_delay_s`: for UNAVAILABLE, RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED; `client`: the
    security options of `services.search.auth.add_client_arguments` by name (tls, tls_ca,
    tls_client_cert, tls_client_key, tls_server_name, token_file, token_env, wait_for_ready; a
    token itself is never a flow parameter, so it stays out of the run's record).
    """
    logger = get_run_logger()
    out_dir = Path(out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_path = out_dir / SUMMARY
    found = read_positions(sources, moves, game)
    positions = found.positions[:limit] if limit is not None else found.positions
    previous = read_summary(summary_path)
    budget = _budget(iterations, restarts, seed, time_ms, neighbour, init, timeout_s)
    keys = {p.position_id: request_key(p, budget) for p in positions}
    done = {i for i, row in previous.items()
            if row.get("status") in ANSWERED and row.get("request") == keys.get(i)}
    todo = [p for p in positions if p.position_id not in done]
    logger.info("%d position(s) from %d source(s) (%s skipped: %s); %d answered before, %d to "
                "run against %s", len(positions), len(sources), sum(found.skipped.values()),
                dict(found.skipped) or "none", len(positions) - len(todo), len(todo), target)

    total = max(len(positions), 1)  # no positions: nothing left to do, 100 %
    progress_id = create_progress_artifact(
        progress=100.0 * (total - len(todo)) / total, key="infer-progress",
        description=f"positions answered of {len(positions)}")
    runner = infer_position.with_options(retries=retries, retry_delay_seconds=retry_delay_s)
    rows = dict(previous)
    ran = Counter()
    queue = iter(todo)
    pending: dict[PrefectFuture, InferPosition] = {}

    def submit() -> None:
        p = next(queue, None)
        if p is not None:
            pending[runner.submit(p.to_json(), str(out_dir), target, client or {}, budget)] = p

    for _ in range(max(concurrency, 1)):
        submit()
    finished = total - len(todo)
    while pending:
        future = next(as_completed(list(pending)))
        p = pending.pop(future)
        try:
            row = future.result()
        except Exception as exc:  # every retry spent: recorded, the run goes on
            logger.warning("%s failed: %s", p.position_id, exc)
            row = {"position_id": p.position_id, "source": p.source, "game": p.game,
                   "board_size": p.board_size, "stones": p.stones, "status": FAILED,
                   "message": str(exc)}
        row["request"] = keys[p.position_id]
        ran[row["status"]] += 1
        rows[p.position_id] = row
        append_row(summary_path, row)
        finished += 1
        update_progress_artifact(progress_id, 100.0 * finished / total)
        submit()

    ordered = [rows[p.position_id] for p in positions if p.position_id in rows]
    selected = {p.position_id for p in positions}
    others = [row for i, row in rows.items() if i not in selected]  # earlier runs' other rows
    atomic_write_text(_csv_text([*ordered, *others], header=True), summary_path)
    result = {"positions": len(positions), "resumed": len(positions) - len(todo),
              "ran": len(todo), "ok": ran[OK], "invalid": ran[INVALID], "failed": ran[FAILED],
              "skipped": dict(sorted(found.skipped.items())), "summary": str(summary_path)}
    create_markdown_artifact(key="infer-summary", markdown=summary_markdown(result, ordered),
                             description="Move-order inference over a collection")
    logger.info("answered %d of %d position(s) this run (%d invalid, %d failed); %s",
                ran[OK] + ran[INVALID], len(todo), ran[INVALID], ran[FAILED], summary_path)
    if todo and ran[FAILED] == len(todo):
        raise RuntimeError(f"every position failed ({len(todo)}): is the search service at "
                           f"{target} up, and its Triton? See {summary_path}")
    return result


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def summary_markdown(result: dict, rows: Sequence[dict]) -> str:
    """The run's counts and its positions' table (the first TABLE_ROWS)."""
    skipped = ", ".join(f"{n} {reason}" for reason, n in result["skipped"].items()) or "none"
    ok = [r for r in rows if r.get("status") == OK]
    exact = [r for r in ok if r.get("exact_match")]
    lines = ["# Move-order inference", "",
             f"{result['positions']} position(s): {result['ran']} run now ({result['ok']} "
             f"ordered, {result['invalid']} invalid, {result['failed']} failed), "
             f"{result['resumed']} answered before. Games skipped: {skipped}."]
    if exact:
        share = sum(r["exact_match"] == "yes" for r in exact) / len(exact)
        per_move = sum(float(r["move_match_rate"]) for r in exact) / len(exact)
        geo = math.exp(sum(math.log(float(r["geometric_mean"])) for r in exact) / len(exact))
        lines += ["", f"Of {len(exact)} position(s) with a known order: exact match "
                      f"{share:.1%}, per-move match {per_move:.1%}; mean inferred geometric "
                      f"mean {geo:.4g}."]
    columns = ("position_id", "stones", "status", "geometric_mean", "greedy_geometric_mean",
               "exact_match", "move_match_rate", "restarts_std", "seconds", "message")
    lines += ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in columns) + " |"
              for r in rows[:TABLE_ROWS]]
    if len(rows) > TABLE_ROWS:
        lines += ["", f"{len(rows) - TABLE_ROWS} more in {result['summary']}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    from services.search import auth

    parser = argparse.ArgumentParser(prog="python -m flows.infer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+",
                        help=f".sgf (Go), {', '.join(RIF_SUFFIXES)} (RenjuNet) or "
                             f"{JSONL_SUFFIX} (stone sets) files")
    parser.add_argument("--out", required=True, help="folder for the games and summary.csv")
    parser.add_argument("--target", default=SEARCH_TARGET, help="search service host:port")
    parser.add_argument("--moves", type=int, default=DEFAULT_MOVES,
                        help="records: the position after this many moves (%(default)s)")
    parser.add_argument("--game", default=None,
                        help="the game of JSONL lines that name none (default: the registry's)")
    parser.add_argument("--iterations", type=int, default=None,
                        help="annealing steps per restart (default: the paper's)")
    parser.add_argument("--restarts", type=int, default=None, help="default: 5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None, help="the first N positions")
    parser.add_argument("--time-ms", type=int, default=None,
                        help="time budget per position (the best order so far is kept)")
    parser.add_argument("--neighbour", default="", help="swp2, mov2, rot3 or mix (default)")
    parser.add_argument("--init", default="", help="greedy (default) or random")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per call (default: time budget + 10 s)")
    parser.add_argument("--concurrency", type=int, default=1, help="calls in flight")
    parser.add_argument("--retries", type=int, default=DEFAULT_RETRIES,
                        help="retries of a call answered UNAVAILABLE, RESOURCE_EXHAUSTED or "
                             "DEADLINE_EXCEEDED (%(default)s)")
    parser.add_argument("--retry-delay", type=float, default=DEFAULT_RETRY_DELAY_S,
                        help="seconds between them (%(default)s)")
    auth.add_client_arguments(parser)
    logs.add_arguments(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    try:  # a missing token file or variable, an unreadable PEM: said now, not per position
        client_auth = auth.client_auth_from(args)
        if client_auth.tls:
            client_auth.credentials()
    except auth.AuthConfigError as exc:
        parser.error(str(exc))
    client = {k: (str(v) if isinstance(v, Path) else v) for k, v in {
        "tls": args.tls, "tls_ca": args.tls_ca, "tls_client_cert": args.tls_client_cert,
        "tls_client_key": args.tls_client_key, "tls_server_name": args.tls_server_name,
        "token_file": args.token_file, "token_env": args.token_env,
        "wait_for_ready": args.wait_for_ready}.items() if v}
    announce_prefect_api()
    result = infer_flow(sources=args.sources, out=args.out, target=args.target,
                        moves=args.moves, game=args.game, iterations=args.iterations,
                        restarts=args.restarts, seed=args.seed, limit=args.limit,
                        time_ms=args.time_ms, neighbour=args.neighbour, init=args.init,
                        timeout_s=args.timeout, concurrency=args.concurrency,
                        retries=args.retries, retry_delay_s=args.retry_delay, client=client)
    print(f"{result['positions']} position(s): {result['ok']} ordered, {result['invalid']} "
          f"invalid, {result['failed']} failed, {result['resumed']} answered before; skipped "
          f"{result['skipped'] or 'none'} -> {result['summary']}")
    return result


if __name__ == "__main__":
    main()
