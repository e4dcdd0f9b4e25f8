"""Prefect flow `selfplay`: the self-play loop, self-play -> ingest -> train -> gate -> rollout.

Run: python -m flows.selfplay --game gomoku --run-dir runs/selfplay/gomoku --iterations 3 \\
         --games 200 [--repository model_repository] [--triton-url 127.0.0.1:8001] ...
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
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from flows import announce_prefect_api, configure_logging
from flows.ingest import ingest
from services import logs, settings
from services.selfplay.loop import STAGES, Budget, LoopState, run_loop
from services.selfplay.settings import SelfPlaySettings
from services.selfplay_loop.stages import LoopSettings, SelfPlayStages
from services.settings import ROOT

DEFAULT_RUN_DIR = str(ROOT / "runs" / "selfplay")
SELFPLAY_PREFIX = "selfplay-"

log = logging.getLogger(__name__)


def ingest_window(*, sources: list[str], out_dir: str, work_dir: str,
                  board_size: int | None) -> dict:
    """The ingest flow on the window's self-play folders (a subflow of this run)."""
    return ingest(sources=sources, out_dir=out_dir, work_dir=work_dir, progress=False,
                  board_size=board_size)


def _number(value: object, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def stage_line(iteration: int, stage: str, summary: dict) -> str:
    """One finished stage, for people."""
    words = {
        "selfplay": lambda s: f"{s['games']} games ({s['played_now']} now), {s['rows']} rows, "
                              f"v{s['serving_version']} playing",
        "ingest": lambda s: f"{s['rows']} rows from iterations {s['window_first_iteration']}.."
                            f"{iteration} (window {s['window_rows']} of {s['total_rows']})",
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
        f"wins {play['wins']}; {play.get('resigned', 0)} resigned, and of the "
        f"{play.get('resign_checked', 0)} played out that would have resigned, "
        f"{play.get('resign_wrong', 0)} did not lose (false positives)",
        "",
        f"**Ingest**: {data['rows']} rows from iterations {data['window_first_iteration']}.."
        f"{iteration} (replay window {data['window_rows']} of {data['total_rows']} rows made), "
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
                  hours: float | None = None) -> dict:
    """Run the loop in `run_dir` until the budget (finished iterations, self-play games, wall
    hours of stage work, all counted over the run folder's life) is spent or a STOP file
    appears; returns where it stands."""
    logger = get_run_logger()
    config = config or LoopSettings()
    stages = SelfPlayStages(config, run_dir, ingest_window, on_progress=logger.info)
    logger.info("self-play loop of %s in %s: %s model in %s", config.game, run_dir,
                stages.model, config.repository)

    def on_stage(iteration: int, stage: str, summary: dict) -> None:
        logger.info(stage_line(iteration, stage, summary))
        if stage == STAGES[-1]:
            record = LoopState.load(Path(run_dir)).current
            create_markdown_artifact(key=f"selfplay-iteration-{iteration}",
                                     markdown=iteration_markdown(iteration, record),
                                     description=f"{config.game} self-play iteration "
                                                 f"{iteration}")

    state, why = run_loop(Path(run_dir), stages, Budget(iterations, budget_games, hours),
                          on_stage=on_stage)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__,
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
    announce_prefect_api()
    out = selfplay_flow(config=config, run_dir=args.run_dir, iterations=args.iterations,
                        budget_games=args.budget_games, hours=args.hours)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
