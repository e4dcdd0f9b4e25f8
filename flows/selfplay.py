"""Prefect flow `selfplay`: the self-play loop, self-play -> ingest -> train -> gate -> rollout.

Run: python -m flows.selfplay --game gomoku --run-dir runs/selfplay/gomoku --iterations 3 \\
         --games 200 [--repository model_repository] [--triton-url 127.0.0.1:8001] ...
         [--dask | --dask-address tcp://scheduler:8786] [--metrics-port 9108]
     touch runs/selfplay/gomoku/STOP      (stops after the running stage; remove it to go on)

The work is `services.selfplay_loop.stages.SelfPlayStages` run by
`services.selfplay.loop.run_loop` (the order, ``loop.json``, the budget, the STOP file); the
ingest stage runs the `ingest` flow as a subflow on the replay window's self-play folders.
The same command again resumes: a killed run goes on in the stage it was in, with the same
iteration numbers, and `--iterations` counts finished iterations of the run folder in all
(a finished run given a larger number goes on). Every setting is a `LoopSettings` field (its
flags and defaults), the games' own a `SelfPlaySettings` field (``--selfplay-*``).

Each game and stage logs one line; each finished iteration attaches a markdown artifact
``selfplay-iteration-N`` (games, rows, losses, the gate's verdict and Elo, what serves), and
the run one ``selfplay-summary``.

Dask: with ``--dask`` (a local cluster of ``--dask-workers`` processes, one thread each,
started for the run) or ``--dask-address`` (a running cluster whose workers see the run
folder and the repository at the same paths), each iteration's games are split into shares
(``--shares``; `services.selfplay_loop.stages.share_plan`, pinned for the iteration) and each
share is a `selfplay-share` task on a worker, which plays its missing games into the
iteration's self-play folder (`run_worker`, kill-safe); the rest of the iteration runs in
this process as without Dask.

Metrics: ``--metrics-port N`` serves the loop's Prometheus metrics on that port of this process
(`services.selfplay_loop.metrics`; off by default).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import Flow, flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows import announce_prefect_api, configure_logging, on_dask
from flows.ingest import ingest
from services import logs, settings
from services.selfplay.loop import STAGES, Budget, LoopState, run_loop
from services.selfplay.settings import SelfPlaySettings
from services.selfplay_loop.metrics import LoopMetrics
from services.selfplay_loop.stages import (
    LoopSettings,
    SelfPlayStages,
    ShareTask,
    play_share,
    prior_words,
)
from services.settings import ROOT

DEFAULT_RUN_DIR = str(ROOT / "runs" / "selfplay")
SELFPLAY_PREFIX = "selfplay-"
DEFAULT_DASK_WORKERS = 2
DEFAULT_REMOTE_SHARES = 4  # shares an iteration is split into on a cluster given by address
SHARE_RETRIES = 2  # a share whose worker died plays its missing games on another

log = logging.getLogger(__name__)


def ingest_window(*, sources: list[str], out_dir: str, work_dir: str,
                  board_size: int | None) -> dict:
    """The ingest flow on the window's self-play folders (a subflow of this run)."""
    return ingest(sources=sources, out_dir=out_dir, work_dir=work_dir, progress=False,
                  board_size=board_size)


@task(name="selfplay-share", task_run_name="self-play {share.worker}", cache_policy=NO_CACHE,
      retries=SHARE_RETRIES)
def play_share_task(share: ShareTask) -> dict[str, Any]:
    """One share of an iteration's games, on whichever worker runs the task; its finished
    games are files, so a retry (or a rerun of the flow) plays only the missing ones."""
    logger = get_run_logger()

    def on_game(game_id: str, record: Any) -> None:
        logger.info("self-play %s: %d moves, %s, winner %d", game_id, len(record.moves),
                    record.end, record.winner)

    return play_share(share, on_game)


def play_shares_as_tasks(shares: Sequence[ShareTask]) -> list[dict[str, Any]]:
    """Every share as a `selfplay-share` task on the flow's task runner, all at once."""
    futures = [play_share_task.submit(share) for share in shares]
    return [future.result() for future in futures]


def _number(value: object, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _prior(ingested: dict) -> str:
    """An ingest summary's earlier runs' folders (`--prior-games`), in the stage's words."""
    return prior_words(ingested.get("prior_sources", 0), ingested.get("prior_rows", 0))


def stage_line(iteration: int, stage: str, summary: dict) -> str:
    """One finished stage, for people."""
    words = {
        "selfplay": lambda s: f"{s['games']} games ({s['played_now']} now), {s['rows']} rows, "
                              f"v{s['serving_version']} playing",
        "ingest": lambda s: f"{s['rows']} rows from iterations {s['window_first_iteration']}.."
                            f"{iteration}{_prior(s)} (window {s['window_rows']} of "
                            f"{s['total_rows']})",
        "train": lambda s: f"{s['steps']} steps, loss {_number(s['first_loss'])} -> "
                           f"{_number(s['last_loss'])}, candidate v{s['candidate_version']}",
        "gate": lambda s: f"{s['verdict']} ({s['wins']}-{s['draws']}-{s['losses']}, Elo "
                          f"{s['elo']}): {s['reason']}",
        "rollout": lambda s: f"v{s['serving']} serves"
                             + (" (the candidate)" if s["rolled_out"] else ""),
    }
    return f"iteration {iteration} {stage}: {words[stage](summary)}"


def iteration_markdown(iteration: int, record: dict) -> str:
    """The artifact of a finished iteration (its stages' summaries)."""
    play, data, fit = record["selfplay"], record["ingest"], record["train"]
    gate, roll = record["gate"], record["rollout"]
    splits = "\n".join(
        f"| {split} | {_number(m.get('loss'))} | {_number(m.get('top1'))} | "
        f"{_number(m.get('value_mse', '-'))} | {m.get('n')} |"
        for split, m in fit["losses"].items())
    return "\n".join([
        f"# Self-play iteration {iteration}",
        "",
        f"**Self-play**: {play['games']} games by v{play['serving_version']} "
        f"({play['played_now']} played in this run), {play['rows']} rows "
        f"({play['full_rows']} full searches), {play['mean_moves']} moves a game; "
        f"wins {play['wins']}; {play.get('resigned', 0)} resigned"
        + (f" below -{play['resign_threshold']:.4f} "
           f"({play['resign_calibration']['rule']})" if "resign_threshold" in play else "")
        + f", and of the {play.get('resign_checked', 0)} played out that would have "
        f"resigned, {play.get('resign_wrong', 0)} did not lose (false positives)",
        "",
        f"**Ingest**: {data['rows']} rows from iterations {data['window_first_iteration']}.."
        f"{iteration}{_prior(data)} (replay window {data['window_rows']} of "
        f"{data['total_rows']} rows made), "
        f"splits {data['splits']}, {data['quarantined']} games quarantined",
        "",
        f"**Train**: {fit['steps']} steps of {fit['batch_size']} rows from "
        f"v{fit['parent_version']} ({fit['config']}), loss {_number(fit['first_loss'])} -> "
        f"{_number(fit['last_loss'])}; candidate **v{fit['candidate_version']}**",
        "",
        "| split | loss | top-1 (played move) | value MSE | rows |",
        "|---|---|---|---|---|",
        splits,
        "",
        f"**Gate**: {gate['verdict']}, {gate['wins']}-{gate['draws']}-{gate['losses']} "
        f"(W-D-L) at {gate['visits']} visits, LLR {gate['llr']} in {gate['bounds']}, Elo "
        f"{gate['elo'] if gate['elo'] is not None else 'n/a'}: {gate['reason']}",
        "",
        f"**Rollout**: v{roll['serving']} serves"
        + (f" (the candidate, {roll['mode']})" if roll["rolled_out"] else
           f" ({roll.get('reason', '')})"),
    ])


@flow(name="selfplay")
def selfplay_flow(config: LoopSettings | None = None, run_dir: str = DEFAULT_RUN_DIR,
                  iterations: int | None = None, budget_games: int | None = None,
                  hours: float | None = None, shares: int | None = None,
                  metrics_port: int | None = None, metrics_host: str = "127.0.0.1") -> dict:
    """Run the loop in `run_dir` until the budget (finished iterations, self-play games, wall
    hours of stage work, all counted over the run folder's life) is spent or a STOP file
    appears; returns where it stands. `shares`: split each new iteration's games into that
    many `selfplay-share` tasks on the flow's task runner (None: play them in this process);
    `metrics_port`: serve the loop's Prometheus metrics there while the flow runs."""
    logger = get_run_logger()
    config = config or LoopSettings()
    metrics = LoopMetrics(config.game)
    metrics.load(LoopState.load(Path(run_dir)))
    server = metrics.serve(metrics_port, metrics_host) if metrics_port is not None else None
    if server is not None:
        logger.info("loop metrics on %s", server.url)
    stages = SelfPlayStages(config, run_dir, ingest_window, on_progress=logger.info,
                            play_shares=play_shares_as_tasks if shares else None,
                            shares=shares or 1, on_game=metrics.game_played)
    logger.info("self-play loop of %s in %s: %s model in %s", config.game, run_dir,
                stages.model, config.repository)
    try:
        return _run(config, run_dir, stages, Budget(iterations, budget_games, hours), metrics)
    finally:
        if server is not None:
            server.close()


def _run(config: LoopSettings, run_dir: str, stages: SelfPlayStages, budget: Budget,
         metrics: LoopMetrics) -> dict:
    logger = get_run_logger()

    def on_stage(iteration: int, stage: str, summary: dict) -> None:
        logger.info(stage_line(iteration, stage, summary))
        metrics.stage_finished(iteration, stage, summary)
        if stage == STAGES[-1]:
            record = LoopState.load(Path(run_dir)).current
            create_markdown_artifact(key=f"selfplay-iteration-{iteration}",
                                     markdown=iteration_markdown(iteration, record),
                                     description=f"{config.game} self-play iteration "
                                                 f"{iteration}")

    state, why = run_loop(Path(run_dir), stages, budget, on_stage=on_stage)
    lines = [f"# Self-play loop: {config.game}", "", f"Ended: {why}; {state.finished_iterations}"
             f" iterations finished, {state.games} self-play games, "
             f"{state.seconds / 3600:.2f} hours of stage work.", "",
             "| iteration | games | rows | candidate | verdict | Elo | serving after |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {h['iteration']} | {h['selfplay']['games']} | {h['ingest']['rows']} | "
              f"v{h['train']['candidate_version']} | {h['gate']['verdict']} | "
              f"{h['gate']['elo']} | v{h['rollout']['serving']} |" for h in state.history]
    create_markdown_artifact(key="selfplay-summary", markdown="\n".join(lines))
    return {"why": why, "iteration": state.iteration, "done": list(state.done),
            "finished_iterations": state.finished_iterations, "games": state.games,
            "run_dir": str(run_dir),
            "serving": state.history[-1]["rollout"]["serving"] if state.history else None}


def selfplay_on(dask_address: str | None = None, dask_workers: int = 0) -> Flow:
    """The `selfplay` flow whose tasks (the self-play shares) run on a Dask cluster: an
    existing one at `dask_address`, or a local one of `dask_workers` worker processes (one
    thread each) started for the run; without either, the flow itself."""
    return on_dask(selfplay_flow, dask_address, dask_workers)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m flows.selfplay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default=DEFAULT_RUN_DIR,
                        help=f"the loop's folder: loop.json, iter-N/, STOP (default "
                             f"{DEFAULT_RUN_DIR})")
    budget = parser.add_argument_group("budget (over the run folder's life; none: no limit)")
    budget.add_argument("--iterations", type=settings.bounded(int, 1), default=None,
                        help="finished iterations")
    budget.add_argument("--budget-games", type=settings.bounded(int, 1), default=None,
                        help="self-play games")
    budget.add_argument("--hours", type=settings.bounded(float, 0), default=None,
                        help="wall hours of stage work")
    dask = parser.add_argument_group("Dask (the self-play games of each iteration as tasks)")
    dask.add_argument("--dask", action="store_true",
                      help=f"on a local Dask cluster (--dask-workers, default "
                           f"{DEFAULT_DASK_WORKERS})")
    dask.add_argument("--dask-workers", type=settings.bounded(int, 0, 1024), default=0,
                      help="local Dask worker processes")
    dask.add_argument("--dask-address", default=None,
                      help="on an existing Dask cluster (tcp://host:8786) whose workers see "
                           "the run folder and the repository at the same paths")
    dask.add_argument("--shares", type=settings.bounded(int, 1, 4096), default=None,
                      help="shares (tasks) a new iteration's games are split into (default: "
                           f"the local workers; with --dask-address {DEFAULT_REMOTE_SHARES})")
    parser.add_argument("--metrics-port", type=settings.bounded(int, 0, 65535), default=None,
                        help="serve the loop's Prometheus metrics on this port (default: off; "
                             "0: any free port)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address the metrics port binds (0.0.0.0 in a pod)")
    settings.add_arguments(parser, LoopSettings, title="loop settings (LoopSettings)")
    settings.add_arguments(parser, SelfPlaySettings, prefix=SELFPLAY_PREFIX,
                           title="how games are played (SelfPlaySettings)")
    logs.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    try:
        played = settings.from_args(SelfPlaySettings, args, prefix=SELFPLAY_PREFIX)
        config = settings.from_args(LoopSettings, args, selfplay=played)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    workers = args.dask_workers or (DEFAULT_DASK_WORKERS if args.dask else 0)
    shares = args.shares or (workers if workers and not args.dask_address else
                             DEFAULT_REMOTE_SHARES if args.dask_address else None)
    # `python -m flows.selfplay` runs this file as __main__: take the flow from the importable
    # module so that Dask workers can unpickle its tasks by reference
    from flows.selfplay import selfplay_on as importable_selfplay_on

    run = importable_selfplay_on(dask_address=args.dask_address, dask_workers=workers)
    announce_prefect_api()
    out = run(config=config, run_dir=args.run_dir, iterations=args.iterations,
              budget_games=args.budget_games, hours=args.hours, shares=shares,
              metrics_port=args.metrics_port, metrics_host=args.metrics_host)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
