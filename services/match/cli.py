"""``movepred match`` and ``movepred gate``: the match runner and the gate from a shell.

    movepred match --game gomoku --engine version:gomoku_policy/3:visits=200 \\
        --engine version:gomoku_policy/2:visits=200 --pairs 100 --out runs/match
    movepred match --game go --size 9 --engine version:go_policy/4:visits=100 \\
        --engine gnugo:level=10 --pairs 20 --out runs/match-go9
    movepred gate --game gomoku --candidate 4 [--visits 200] [--max-games 400]
    movepred openings --game gomoku --judge version:gomoku_policy/4:visits=400 --count 200 \
        --band 0.2 --out runs/openings/gomoku-balanced.json
    movepred match ... --openings runs/openings/gomoku-balanced.json

`match` prints a line per game and, at the end, the standings of every player of the folder's
ratings log (all its games, earlier matches included) with 95% intervals; it writes
``elo.png`` there and the versions' ratings into their model cards (``--no-cards``: not).
`gate` plays the candidate against the serving version until the SPRT decides, prints the
decision and acts on it (quarantine; with ``--triton-url``, the rollout of a passed version;
``--dry-run``: decide only). Engine specs: `services.match.specs`. A wrong spec, a version
that is not published or a program that is not there is refused before the first game, with
exit code 2. `openings` builds a balanced suite (`services.selfplay.openings`): random openings
kept when the judge, a version searched at a budget, rates them within ``--band`` of even; a
match or a gate given it with ``--openings`` plays its openings instead of random ones, and
prints black's score over the match's games, the suite's balance as played.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from services.games.registry import default_game, get_game, registered_games
from services.match.engines import SearchEngine
from services.match.gate import (
    DEFAULT_GATE_VISITS,
    DEFAULT_MAX_GAMES,
    gate_by_match,
)
from services.match.rating_match import rating_match
from services.match.runner import MatchConfig
from services.match.specs import EngineSpecError, Player, open_engine, parse_engine, resolve
from services.selfplay.openings import balanced_suite, load_suite, save_suite, search_judge
from services.settings import DEFAULT_REPOSITORY, ROOT, bounded

EXIT_USAGE = 2
DEFAULT_PAIRS = 50
DEFAULT_OUT = ROOT / "runs" / "match"


_positive = bounded(int, 1)  # argparse types: whole numbers from 1, from 0
_count = bounded(int, 0)


def _engine(text: str) -> str:
    try:
        parse_engine(text)
    except EngineSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _games() -> list[str]:
    return [g.name for g in registered_games()]


def progress_line(entry: dict[str, Any], done: int, total: int, started: float) -> str:
    """One game, for people."""
    result = "draw" if not entry["winner"] else f"{entry['winner']} wins"
    return (f"game {done}/{total} (opening {entry['opening_index']}): {entry['black']} (black) "
            f"vs {entry['white']} (white): {result} ({entry['end']}) after {entry['plies']} "
            f"moves [{time.perf_counter() - started:.0f} s]")


def cmd_match(args: argparse.Namespace) -> int:
    game = get_game(args.game)
    repository = Path(args.repository)
    try:
        players: list[Player] = [resolve(spec, game, repository) for spec in args.engine]
        if len({p.label for p in players}) != len(players):
            raise EngineSpecError("two engines have the same name: give one name=...")
        _check_size(game, args.size)
        suite = _suite(args, game)
        pairs = args.pairs or (len(suite) if suite else DEFAULT_PAIRS)
        config = MatchConfig(pairs=pairs, size=args.size or None,
                             plies=tuple(args.plies), radius=args.radius, seed=args.seed,
                             max_moves=args.max_moves, jobs=args.jobs, suite=suite)
    except (EngineSpecError, ValueError) as exc:
        print(f"movepred match: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    games = len(players) * (len(players) - 1) * pairs
    print(f"{game.title}: {', '.join(p.label for p in players)}; {pairs} openings"
          f"{' of ' + args.openings if args.openings else ''}, "
          f"{games} games, {args.jobs} at a time; log {Path(args.out) / 'games.jsonl'}",
          flush=True)
    started = time.perf_counter()
    counter = {"n": 0}

    def on_game(entry: dict[str, Any]) -> None:
        counter["n"] += 1
        print(progress_line(entry, counter["n"], games, started), flush=True)

    result = rating_match(game, players, Path(args.out), config, repository=repository,
                          anchor=args.anchor, cards=not args.no_cards, on_game=on_game)
    print(f"played {result.report.played}, skipped {result.report.skipped} finished before; "
          f"standings over all {result.log_games} games of the ratings log "
          f"(anchor {result.anchor} = 0, 95% intervals):")
    print(result.table)
    print(black_line(result.report.entries))
    if result.plot:
        print(f"plot: {result.plot}")
    if result.cards:
        print(f"ratings written to the model cards of: {', '.join(result.cards)}")
    return 0


def _check_size(game: Any, size: int) -> None:
    if size and size not in game.sizes:
        raise ValueError(f"{game.title} is played on {', '.join(map(str, game.sizes))}, "
                         f"not {size}")


def _suite(args: argparse.Namespace, game: Any) -> tuple[tuple[int, ...], ...]:
    """The openings of ``--openings FILE`` (empty without it)."""
    if not args.openings:
        return ()
    return load_suite(Path(args.openings), game, args.size or None).openings


def black_line(entries: list[dict[str, Any]]) -> str:
    """Black's score over `entries` (draws a half): how even the openings were as played."""
    if not entries:
        return "black's score: no games"
    score = sum(float(e["score"]) for e in entries) / len(entries)
    return f"black's score over these players' {len(entries)} games: {score:.3f}"


def cmd_openings(args: argparse.Namespace) -> int:
    game = get_game(args.game)
    try:
        _check_size(game, args.size)
        player = resolve(args.judge, game, Path(args.repository))
        engine = open_engine(player, game, seed=args.seed)
        if not isinstance(engine, SearchEngine) or engine.visits < 1:
            raise EngineSpecError(f"the judge must be a searched version with visits=, not "
                                  f"{args.judge}")
    except (EngineSpecError, ValueError) as exc:
        print(f"movepred openings: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    started = time.perf_counter()

    def progress(judged: int, kept: int) -> None:
        if judged % 50 == 0:
            print(f"{judged} judged, {kept} kept [{time.perf_counter() - started:.0f} s]",
                  flush=True)

    try:
        suite = balanced_suite(game, args.count, search_judge(engine.evaluator, engine.visits),
                               band=args.band, size=args.size or None,
                               plies=tuple(args.plies), radius=args.radius, seed=args.seed,
                               max_candidates=args.max_candidates, judge_name=player.label,
                               on_candidate=progress)
    except ValueError as exc:
        print(f"movepred openings: error: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.close()
    save_suite(suite, Path(args.out))
    print(f"{len(suite.openings)} openings within {args.band} of even of {suite.candidates} "
          f"judged by {player.label}; mean value (black's side) "
          f"{sum(suite.values) / len(suite.values):+.3f}; written to {args.out}")
    return 0


def cmd_gate(args: argparse.Namespace) -> int:
    game = get_game(args.game)
    client = None
    if args.triton_url:
        from services.triton.client import PolicyClient

        client = PolicyClient(args.triton_url, args.model_name or game.default_model,
                              game=game)
    started = time.perf_counter()
    counter = {"n": 0}

    def on_game(entry: dict[str, Any]) -> None:
        counter["n"] += 1
        print(progress_line(entry, counter["n"], args.max_games, started), flush=True)

    try:
        decision = gate_by_match(Path(args.repository), game, args.candidate,
                                 model_name=args.model_name, serving=args.serving,
                                 visits=args.visits, max_games=args.max_games,
                                 out_dir=args.out, jobs=args.jobs, seed=args.seed,
                                 size=args.size or None, rollout_client=client,
                                 act=not args.dry_run, suite=_suite(args, game),
                                 on_game=on_game)
    except (EngineSpecError, ValueError) as exc:
        print(f"movepred gate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if client is not None:
            client.close()
    print(f"{'PASSED' if decision.passed else 'REFUSED'}: {decision.reason}")
    if decision.quarantined:
        print(f"quarantined: {decision.quarantined}")
    if decision.rollout is not None:
        print("rollout: " + json.dumps(decision.rollout, default=str))
    return 0 if decision.passed else 1


def _common(p: argparse.ArgumentParser, *, plays: bool = True) -> None:
    p.add_argument("--game", choices=_games(), default=default_game().name)
    p.add_argument("--size", type=_count, default=0, help="board size (0: the game's default)")
    p.add_argument("--repository", default=DEFAULT_REPOSITORY,
                   help="the model repository the versions come from")
    p.add_argument("--seed", type=_count, default=0, help="the opening suite's seed")
    if plays:
        p.add_argument("--jobs", type=_positive, default=1,
                       help="games at once, one process each (default 1)")
        p.add_argument("--openings", default=None, metavar="FILE",
                       help="play this saved suite's openings (movepred openings) instead of "
                            "random ones")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO")


def _random_openings(p: argparse.ArgumentParser, plies_help: str) -> None:
    """The random openings' shape: how many stones, how near the centre."""
    p.add_argument("--plies", type=_count, nargs=2, default=(2, 4), metavar=("MIN", "MAX"),
                   help=plies_help)
    p.add_argument("--radius", type=_count, default=3,
                   help="openings' stones within this many lines of the centre")


def add_match_commands(subparsers: Any) -> dict[str, Any]:
    """Register `match` and `gate` (a registrar for `services.cli.REGISTRARS`)."""
    m = subparsers.add_parser(
        "match", help="a rated match between versions and engines",
        description=__doc__.split("\n\n")[0],
        epilog="Engines: version:[MODEL/]N|serving|latest[:visits=V][:time_ms=T][:value=0]"
               "[:rollout_lambda=L][:batch=B][:c_puct=C][:triton=HOST:PORT], policy:[MODEL/]N, "
               "gnugo[:level=L][:path=P], gtp:cmd=COMMAND, "
               "gomocup:[timeout_turn=MS:][rule=BITS:]cmd=COMMAND; any with :name=LABEL. "
               "Each opening is played twice per two engines, colours swapped.")
    m.add_argument("--engine", action="append", type=_engine, required=True,
                   metavar="SPEC", help="a player (at least two)")
    m.add_argument("--pairs", type=_positive, default=None,
                   help=f"openings; each is played twice by every two engines (default "
                        f"{DEFAULT_PAIRS}, or all of --openings)")
    m.add_argument("--out", default=str(DEFAULT_OUT),
                   help="match folder: games.jsonl (the ratings log), records/, elo.png")
    _random_openings(m, "stones of an opening (default 2 4; 0 0: the empty board)")
    m.add_argument("--max-moves", type=_count, default=0,
                   help="moves before a game is a draw (0: twice the board's points)")
    m.add_argument("--anchor", default=None,
                   help="the player rated 0 (default: the first --engine)")
    m.add_argument("--no-cards", action="store_true",
                   help="do not write the ratings into the versions' model cards")
    _common(m)
    g = subparsers.add_parser(
        "gate", help="the candidate version against the serving one, stopped by an SPRT",
        description="Play --candidate against the serving version at fixed visits until the "
                    "SPRT (elo0 0, elo1 35, alpha = beta = 0.05) decides or --max-games are "
                    "played; passed: ready for rollout (rolled out with --triton-url); "
                    "failed or undecided: quarantined.")
    g.add_argument("--candidate", type=_positive, required=True, help="the candidate version")
    g.add_argument("--serving", type=_positive, default=None,
                   help="the version to beat (default: the rollout record's current, else the "
                        "newest other published version)")
    g.add_argument("--model-name", default=None, help="default: the game's model")
    g.add_argument("--visits", type=_positive, default=DEFAULT_GATE_VISITS)
    g.add_argument("--max-games", type=_positive, default=DEFAULT_MAX_GAMES)
    g.add_argument("--out", type=Path, default=None,
                   help="the gate's games (default runs/gate/<model>/v<N>-vs-v<M>-<V>visits)")
    g.add_argument("--triton-url", default=None,
                   help="roll a passed candidate out on this Triton")
    g.add_argument("--dry-run", action="store_true",
                   help="decide only: no model card, quarantine or rollout")
    _common(g)
    o = subparsers.add_parser(
        "openings", help="a balanced opening suite, judged by a searched version",
        description="Draw random openings (as a match's) and keep those the judge, a version "
                    "searched at its visits, rates within --band of even (its root value from "
                    "black's side), until --count are kept; written as JSON for --openings.")
    o.add_argument("--judge", type=_engine, required=True, metavar="SPEC",
                   help="version:[MODEL/]N:visits=V (a searched version)")
    o.add_argument("--count", type=_positive, default=100, help="openings to keep")
    o.add_argument("--band", type=float, default=0.2,
                   help="largest |value| of a kept opening, value in [-1, 1] (default 0.2)")
    _random_openings(o, "stones of an opening (default 2 4)")
    o.add_argument("--max-candidates", type=_positive, default=10_000,
                   help="most openings judged before giving up")
    o.add_argument("--out", required=True, help="the suite's JSON file")
    _common(o, plays=False)
    return {"match": _with_logging(cmd_match), "gate": _with_logging(cmd_gate),
            "openings": _with_logging(cmd_openings)}


def _with_logging(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if len(getattr(args, "engine", None) or ["", ""]) < 2:
            print("movepred match: error: give at least two --engine", file=sys.stderr)
            return EXIT_USAGE
        return handler(args)
    return run


__all__ = ["add_match_commands", "cmd_gate", "cmd_match", "progress_line"]
