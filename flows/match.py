"""Prefect flow `match`: a rated match between versions and engines, and its standings.

Run: python -m flows.match --game gomoku --engine version:gomoku_policy/3:visits=200 \\
         --engine version:gomoku_policy/2:visits=200 [--pairs 50] [--out runs/match] [--jobs 1]

The work is `services.match.rating_match` (the same as ``movepred match``): the games the
folder's log does not hold yet (each opening twice per two engines, colours swapped; resumable:
a rerun of a killed run plays only the missing games), then the Elo of every player over all
games of the log with 95% intervals, ``elo.png`` (Elo against version) and the versions' model
cards. The ``match-standings`` markdown artifact holds the standings table and the plot's path.
No retries: a failed game is a fact about an engine, not a flaky call; a rerun resumes.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from flows import announce_prefect_api, configure_logging
from services import logs
from services.games.registry import default_game, get_game, registered_games
from services.match.cli import progress_line
from services.match.rating_match import rating_match
from services.match.runner import MatchConfig
from services.match.specs import resolve
from services.settings import DEFAULT_REPOSITORY, ROOT

DEFAULT_OUT = str(ROOT / "runs" / "match")

log = logging.getLogger(__name__)


@task(name="play-and-rate")
def play_and_rate(game: str, engines: list[str], out: str, repository: str, pairs: int,
                  size: int, jobs: int, seed: int, max_moves: int, anchor: str | None,
                  cards: bool) -> dict:
    """Play the missing games, rate the log; the summary with the standings table."""
    logger = get_run_logger()
    played = get_game(game)
    players = [resolve(spec, played, Path(repository)) for spec in engines]
    config = MatchConfig(pairs=pairs, size=size or None, seed=seed, max_moves=max_moves,
                         jobs=jobs)
    total = len(players) * (len(players) - 1) * pairs
    count = {"n": 0}

    def on_game(entry: dict) -> None:
        count["n"] += 1
        logger.info(progress_line(entry, count["n"], total, started))

    started = time.perf_counter()
    result = rating_match(played, players, Path(out), config, repository=Path(repository),
                          anchor=anchor, cards=cards, on_game=on_game)
    return {**result.summary(), "table": result.table}


@flow(name="match")
def match_flow(engines: list[str], game: str = default_game().name, pairs: int = 50,
               out: str = DEFAULT_OUT, repository: str = DEFAULT_REPOSITORY, size: int = 0,
               jobs: int = 1, seed: int = 0, max_moves: int = 0, anchor: str | None = None,
               cards: bool = True) -> dict:
    """A rated match of `engines` (specs: `services.match.specs`); see the module."""
    summary = play_and_rate(game, engines, out, repository, pairs, size, jobs, seed,
                            max_moves, anchor, cards)
    markdown = "\n".join([
        f"# Match: {', '.join(engines)}",
        "",
        f"{summary['played']} games played now, {summary['skipped']} finished before; "
        f"standings over all {summary['log_games']} games of the ratings log "
        f"`{summary['log']}` (anchor {summary['anchor']} = 0 Elo, 95% intervals):",
        "",
        summary["table"],
        "",
        f"Plot (Elo against version): `{summary['plot']}`" if summary["plot"] else "No plot.",
    ])
    create_markdown_artifact(key="match-standings", markdown=markdown,
                             description=f"{game} match standings")
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.match", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", action="append", required=True, metavar="SPEC")
    parser.add_argument("--game", choices=[g.name for g in registered_games()],
                        default=default_game().name)
    parser.add_argument("--pairs", type=int, default=50)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--repository", default=DEFAULT_REPOSITORY)
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-moves", type=int, default=0)
    parser.add_argument("--anchor", default=None)
    parser.add_argument("--no-cards", action="store_true")
    logs.add_arguments(parser)
    args = parser.parse_args(argv)
    if len(args.engine) < 2 or args.pairs < 1 or args.jobs < 1:
        parser.error("give at least two --engine, --pairs >= 1 and --jobs >= 1")
    configure_logging(args)
    announce_prefect_api()
    out = match_flow(engines=args.engine, game=args.game, pairs=args.pairs, out=args.out,
                     repository=args.repository, size=args.size, jobs=args.jobs,
                     seed=args.seed, max_moves=args.max_moves, anchor=args.anchor,
                     cards=not args.no_cards)
    print(out["table"])
    print(json.dumps({k: out[k] for k in ("played", "skipped", "log_games", "plot")}, indent=2))


if __name__ == "__main__":
    main()
