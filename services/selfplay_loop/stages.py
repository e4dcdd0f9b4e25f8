"""The self-play loop's stages for any registered game: play, ingest, train, gate, roll out.

`SelfPlayStages` implements `services.selfplay.loop.Stages` from one `LoopSettings`; the loop
(`run_loop`) runs them in order and records each summary in ``loop.json``. One iteration:

1. **selfplay**: the serving version (pinned for the iteration in ``serving.json``: the
   rollout record's ``current``, else the newest version) plays `games` games into
   ``iter-N/selfplay-N/``, from an opening suite: in this process (`run_worker`, worker
   ``itN``), or split into shares (`share_plan`, pinned in
   ``shares.json``: worker ``itN-sK`` plays its share's games) that the injected
   `PlayShares` runs where it likes (the flow: Prefect tasks on Dask workers). The network
   is evaluated in the share's process (`LocalEvaluator` on the version's ``model.pt``), or
   with `selfplay_triton_url` by that Triton, every request pinned to the serving version
   (`services.triton.pinned`: a rollout during the iteration does not change its games'
   network), after a check that the version is ready there (else the stage fails before a
   game is written); the summary's ``evaluator`` says which. The games
   resign at the threshold pinned in ``resign.json`` (`resign_threshold`): with
   `resign_fp_target` 0 the games' own setting, else calibrated from the played-out games of
   the newest iterations the serving version played (`services.selfplay.resign`; its first
   iteration plays every game out); the summary records it. The
   first iteration needs a version: `init_version` (recorded as serving), else the version
   the repository serves, else the game's self-play configuration (`Game.selfplay_config`,
   else its default one; or `config`) with weights drawn from `seed`, published by
   `publish_model` and recorded as serving. A network the trainer cannot train by gradient
   (`require_trainable`) is refused before a game is played.
2. **ingest**: the replay window (`services.selfplay_loop.window`, KataGo's rule) picks the
   newest iterations' self-play folders, and with `prior_games` earlier runs' folders as
   older than iteration 0 (each given as ``prior-...=PATH``, its own label); the injected
   `ingest` (the ingest flow) writes them as shards with policy targets into
   ``iter-N/dataset/``.
3. **train**: from the serving network's weights (`TrainConfig.init_weights`, extracted from
   its ``model.pt``), for min(`train_steps`, `samples_per_row` x new rows / batch) steps
   (KataGo's max-train-bucket-per-new-data: each new row is seen about 4 times), then the
   candidate is published (`publish_network`) with its lineage under ``selfplay_loop`` in its
   metadata. The value head gets about `value_per_game` targets per game and epoch (the
   loader's value sampling), an `expert_share` of each batch may come from an
   `expert_dataset`, and the summary records the value loss on the self-play games held out
   whole (the dataset's ``game_test``: 5% of games by their content hash, the same games in
   every iteration's rebuild, never trained on) and on the expert dataset's ``game_test``, at
   every evaluation (`held_out_value`) and at the end (`losses`).
4. **gate**: `gate_by_match`, an SPRT match of the candidate against the iteration's serving
   version at `gate_visits`, at most `gate_max_games` games; a candidate that fails (or is
   undecided at the cap) is quarantined and the serving version stays.
5. **rollout**: a passed candidate becomes the serving version: without `triton_url`, in the
   repository's rollout record (``rollout.json``: the next iteration's self-play uses it);
   with it, rolled out on that Triton (`services.triton.rollout.rollout`, as ``movepred
   rollout`` does; a refusal keeps the serving version).

Kill-safety (the loop reruns the stage that was running): self-play plays only the missing
games (a share's worker name and games are pinned, so a rerun on another number of workers,
or in this process, plays the same ids, at the pinned resign threshold); the ingest rewrites
its manifest whole from the same folders; training resumes from its checkpoint, and a
candidate published before the kill is found by its lineage, never published twice; the
gate's match log skips finished games (a quarantined candidate is recognised); the rollout
does nothing when the candidate already serves.

Cost: each stage's summary holds ``wall_seconds`` and ``cpu_seconds``, the CPU time of this
process (every thread) and of its finished child processes during the stage, plus the CPU
time the shares report from other processes (Dask workers), over every run of the stage: a
run that was killed left its cost so far in the iteration's ``cost/`` ledgers
(`services.selfplay_loop.cost`, stale by at most half a minute), and the summary adds it
(``earlier_runs``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from services.atomic_files import atomic_path, atomic_write_text
from services.dataset.shards import GAME_SPLIT
from services.defaults import MODEL_FILE
from services.evaluator import PolicyEvaluator
from services.evaluator_cache import CachingEvaluator, EvalCache
from services.games.base import BLACK, WHITE, Game
from services.games.registry import default_game, get_game, registered_games
from services.match.cli import progress_line
from services.match.gate import DEFAULT_GATE_VISITS, DEFAULT_MAX_GAMES, gate_by_match
from services.models.configs import CONFIGS, spec
from services.models.local_evaluator import LocalEvaluator
from services.models.weights import network
from services.ratings.sprt import DEFAULT_ALPHA, DEFAULT_BETA, DEFAULT_ELO0, DEFAULT_ELO1
from services.repository.rollout_state import (
    now_text,
    read_state,
    reference_version,
    rollout_lock,
    write_state,
)
from services.repository.version_files import read_version_metadata
from services.repository.versions import list_versions, version_dir
from services.selfplay.loop import LoopState, iteration_folder
from services.selfplay.openings import load_suite, opening_suite
from services.selfplay.pairs import folder_game, game_files
from services.selfplay.play import END_RESIGNED
from services.selfplay.records import GAMES_DIR, record_suffix
from services.selfplay.resign import calibrate
from services.selfplay.settings import SelfPlaySettings
from services.selfplay.worker import DEFAULT_CONCURRENCY, WorkerReport, run_worker
from services.selfplay_loop.cost import (
    COST_DIR,
    CostLedger,
    RunCost,
    earlier_cost,
    process_cpu_seconds,
    process_identity,
    share_ledger,
    stage_ledger,
)
from services.selfplay_loop.window import (
    DEFAULT_EXPAND,
    DEFAULT_EXPONENT,
    DEFAULT_MIN_ROWS,
    window_iterations,
)
from services.settings import DEFAULT_REPOSITORY, check_settings, setting
from services.trainer.publish import publish_model, publish_network
from services.trainer.train import (
    DEFAULT_THREADS,
    EVALUATED_SPLITS,
    EXPERT_GAME_SPLIT,
    TrainConfig,
    train,
)

log = logging.getLogger(__name__)

LINEAGE_KEY = "selfplay_loop"  # a candidate's metadata entry: run folder, iteration, parent
SERVING_FILE = "serving.json"
SHARES_FILE = "shares.json"  # an iteration's self-play shares, pinned at its start
RESIGN_FILE = "resign.json"  # an iteration's resign threshold, pinned at its start
PLAYED_OUT = "played out"  # the resign rule of a serving version's first iteration
# minigo's and Leela Zero's target share of wrong resignations among the played-out games
DEFAULT_RESIGN_FP_TARGET = 0.05
DEFAULT_RESIGN_ITERATIONS = 3  # newest finished iterations whose played-out games calibrate
WEIGHTS_FILE = "serving-weights.pt"
LOCK_TIMEOUT_S = 300.0
KATAGO_SAMPLES_PER_ROW = 4.0  # KataGo's max-train-bucket-per-new-data
LOOP_VALUE_PER_GAME = 1.0  # value targets per game and epoch (BAKAGO: one position a game)
# the splits whose value loss the train summary reports: the self-play games held out whole
# (the dataset's game_test) and the expert dataset's (`LoopSettings.expert_dataset`)
HELD_OUT_GAMES = (GAME_SPLIT, EXPERT_GAME_SPLIT)


@dataclass(frozen=True)
class LoopSettings:
    """Everything one self-play loop is run with: the command line's flags (`flows.selfplay`)
    and the flow's parameter. `selfplay` is how the games are played (its own flags)."""

    game: str = setting(default_game().name, "the registered game to play",
                        choices=lambda: [g.name for g in registered_games()])
    board_size: int | None = setting(None, "board size (default: the game's default size)",
                                     minimum=1)
    games: int = setting(200, "self-play games per iteration", minimum=1)
    concurrency: int = setting(DEFAULT_CONCURRENCY, "self-play games in flight at once (their "
                               "leaves batched into one network call)", minimum=1)
    openings: int = setting(64, "openings of the self-play suite (games cycle through them)",
                            minimum=1)
    opening_plies: int = setting(4, "most stones of a suite opening (from 2, or 1 when 1; 0: "
                                    "every game from the empty board)", minimum=0)
    opening_file: str | None = setting(None, "a saved opening suite (movepred openings) that "
                                             "self-play cycles through and the gate plays, "
                                             "instead of random openings")
    seed: int = setting(0, "seed of the games, the openings, the first network and training",
                        minimum=0)
    repository: str = setting(DEFAULT_REPOSITORY, "model repository the versions live in")
    model_name: str | None = setting(None, "model name in the repository (default: the "
                                           "game's model for the network's input)")
    config: str | None = setting(None, "network configuration of the first version when the "
                                       "repository has none (default: the game's "
                                       "self-play configuration)")
    init_version: int | None = setting(None, "the version the first iteration plays with "
                                             "(recorded as serving; default: the serving "
                                             "one, else a seeded new one)", minimum=1)
    train_steps: int = setting(1000, "most training steps an iteration takes", minimum=1)
    batch_size: int = setting(256, "training rows a step (at most the window's train rows)",
                              minimum=1)
    learning_rate: float = setting(0.001, "Adam's learning rate", minimum=0)
    lr_schedule: str = setting("constant", "learning-rate schedule of each iteration's "
                                           "training (cosine: to 0 at its last step)",
                               choices=("constant", "cosine"))
    samples_per_row: float = setting(
        KATAGO_SAMPLES_PER_ROW, "most training samples per new self-play row (KataGo's "
                                "max-train-bucket-per-new-data); per window row with "
                                "--candidate-config", minimum=0)
    # KataGo trains each network on from its predecessor's weights, a few samples per new row.
    # A fresh network trained on the whole window every iteration is the way to change the
    # network's size mid-run, and on a small loop it made more of the same games than the
    # continued training did (docs/selfplay.md, "Training on the whole history")
    candidate_config: str | None = setting(
        None, "train each candidate afresh as this network configuration (weights drawn from "
              "the iteration's seed, --samples-per-row counted per window row) instead of "
              "continuing the serving version's weights (default: continue them)",
        choices=lambda: sorted(CONFIGS))
    # KataGo's runs keep one data folder across generations and restarts; a new run here
    # starts from an earlier one's games this way instead of from an empty window
    prior_games: str | None = setting(
        None, "a folder of earlier runs' self-play folders (every folder under it that holds "
              "games/) that join the replay window as older than iteration 0, labelled "
              "prior-<their path under it> (default: the run's own games only)")
    train_threads: int = setting(DEFAULT_THREADS, "torch intra-op threads of the train stage "
                                 "(more for a large --candidate-config network on idle cores)",
                                 minimum=1, maximum=1024)
    window_min_rows: int = setting(DEFAULT_MIN_ROWS, "replay window: every row while the "
                                   "loop has made fewer, then KataGo's taper", minimum=1)
    window_expand: float = setting(DEFAULT_EXPAND, "replay window's growth per row at "
                                   "window-min-rows", minimum=0)
    window_exponent: float = setting(DEFAULT_EXPONENT, "replay window's taper exponent",
                                     minimum=0.01, maximum=1)
    # one value target per game and epoch (the BAKAGO report's one position per game): every
    # position of a self-play game shares its result, and a few hundred games an iteration
    # would otherwise teach the value head the games (`TrainConfig.value_per_game`)
    value_per_game: float = setting(LOOP_VALUE_PER_GAME, "value targets per game and epoch "
                                    "(each row keeps its result with probability min(1, k / "
                                    "its game's rows); 0: every row)", minimum=0)
    expert_dataset: str | None = setting(None, "dataset folder of expert positions (the "
                                               "ingest flow's shards of records): mixed into "
                                               "training at --expert-share, its held-out games "
                                               "(game_test) scored every epoch")
    expert_share: float = setting(0.0, "share of each training batch from --expert-dataset "
                                       "(0: self-play rows only)", minimum=0, maximum=0.95)
    gate_visits: int = setting(DEFAULT_GATE_VISITS, "visits a move in the gate's match",
                               minimum=1)
    gate_max_games: int = setting(DEFAULT_MAX_GAMES, "most games of the gate's match (an "
                                  "undecided SPRT there fails the candidate)", minimum=2)
    gate_jobs: int = setting(1, "the gate's games at once (processes)", minimum=1)
    elo0: float = setting(DEFAULT_ELO0, "SPRT: Elo of the null hypothesis")
    elo1: float = setting(DEFAULT_ELO1, "SPRT: Elo of the alternative")
    alpha: float = setting(DEFAULT_ALPHA, "SPRT: false-pass rate", minimum=0.0001,
                           maximum=0.5)
    beta: float = setting(DEFAULT_BETA, "SPRT: false-fail rate", minimum=0.0001, maximum=0.5)
    # on by default: a fixed threshold resigned wrongly in 10 of 33 checked Go 9x9 games (30%),
    # and each wrong resignation is a wrong value target; the calibration starts from
    # --selfplay-resign-threshold and keeps it while the played-out games say too little
    resign_fp_target: float = setting(
        DEFAULT_RESIGN_FP_TARGET, "calibrate the resign threshold each iteration so that at "
        "most this share of the played-out games' would-be resignations is wrong "
        "(services.selfplay.resign; 0: the fixed --selfplay-resign-threshold)",
        minimum=0, maximum=0.5)
    resign_iterations: int = setting(DEFAULT_RESIGN_ITERATIONS, "newest finished iterations "
                                     "whose played-out games calibrate the resign threshold",
                                     minimum=1)
    triton_url: str | None = setting(None, "a running Triton to roll passed versions out on "
                                           "(default: record them as serving in the "
                                           "repository's rollout record only)")
    # not defaulted to --triton-url: rolling versions out on a Triton and evaluating the games
    # on it are separate choices (a Triton on a CPU host costs a round trip per leaf batch,
    # more than the in-process forward of a small network), so giving --triton-url never
    # moves a run's games off the process; with a GPU, give both the same address, so that
    # each passed version is loaded on the Triton that plays the next iteration
    selfplay_triton_url: str | None = setting(
        None, "a running Triton (host:port, gRPC) whose copy of the serving version evaluates "
        "the self-play games, every request pinned to that version; it must be loaded there "
        "(give --triton-url the same address to roll passed versions out on it) (default: "
        "in-process TorchScript of the version folder)")
    selfplay: SelfPlaySettings = field(default_factory=SelfPlaySettings,
                                       metadata={"help": "how games are played", "cli": False})

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class ShareTask:
    """One share of an iteration's self-play: worker `worker` plays games 0..`games`-1 of its
    name into `out_dir` with version `version` of `model_name`: in-process from
    `version_folder`, or with `triton_url` through that Triton, pinned to `version`.
    Everything is plain data, so a share can be pickled to another process (a Dask worker)
    that sees the same files (and reaches the same Triton)."""

    game: str
    size: int
    version_folder: str
    out_dir: str
    worker: str
    games: int
    settings: SelfPlaySettings
    seed: int
    concurrency: int
    openings: tuple[tuple[int, ...], ...]
    model_name: str = ""
    version: int = 0
    triton_url: str | None = None
    cost_dir: str = ""  # where the share keeps its cost ledger (`cost`); "" keeps none

    @property
    def evaluator(self) -> str:
        """Where the share's network is evaluated: ``triton`` or ``local``."""
        return "local" if self.triton_url is None else "triton"


def play_share(task: ShareTask,
               on_game: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
    """Play a share's missing games (`run_worker`, kill-safe) and say what it did: games
    played now and before, their moves and root visits, wall and CPU seconds, the process it
    ran in (its CPU is counted once by the stage: here when another process played it), the
    earlier runs its cost ledger holds (with `cost_dir`; written after every game) and the
    evaluator that played them. Through Triton, a version not ready there is refused before a
    game is written (`VersionNotReadyError`), and an error of Triton during the games is
    raised, not swallowed: the stage fails, and its rerun plays the missing games."""
    game = get_game(task.game)
    evaluator, close = share_evaluator(task, game)
    ledger = CostLedger(share_ledger(Path(task.cost_dir), task.worker)) if task.cost_dir else None

    def finished(game_id: str, record: Any) -> None:
        if ledger is not None:
            ledger.try_write()
        if on_game is not None:
            on_game(game_id, record)

    cpu = process_cpu_seconds()
    try:
        with ledger if ledger is not None else contextlib.nullcontext():
            report: WorkerReport = run_worker(
                game, evaluator, Path(task.out_dir), games=task.games, settings=task.settings,
                worker=task.worker, seed=task.seed, concurrency=task.concurrency,
                size=task.size, openings=task.openings, on_game=finished)
    finally:
        close()
    earlier = ledger.earlier if ledger is not None else []
    return {"worker": task.worker, "evaluator": task.evaluator,
            "played": len(report.played), "skipped": report.skipped,
            "moves": report.moves,
            "visits": sum(m.visits for g in report.played for m in g.moves),
            "seconds": round(report.seconds, 3),
            "cpu_seconds": round(process_cpu_seconds() - cpu, 3),
            "process": process_identity(),
            "earlier_runs": [dataclasses.asdict(r) for r in earlier]}


def share_evaluator(task: ShareTask, game: Game) -> tuple[PolicyEvaluator, Callable[[], None]]:
    """The network a share plays with, and what closes it: the version folder's TorchScript in
    this process, or (`triton_url`) a Triton client pinned to the share's version, checked
    ready there first, behind the same cache of answers as the local one's
    (`services.evaluator_cache`: a search on a fresh tree each move asks again for many of
    the previous move's positions; a Triton round trip saved each)."""
    if task.triton_url is None:
        return LocalEvaluator.from_version_folder(task.version_folder), lambda: None
    from services.triton.pinned import open_pinned

    pinned = open_pinned(task.triton_url, task.model_name, task.version, game)
    return CachingEvaluator(pinned, EvalCache()), pinned.close


class PlayShares(Protocol):
    """Runs an iteration's self-play shares (anywhere that sees the files) and returns each
    one's `play_share` report, in order."""

    def __call__(self, tasks: Sequence[ShareTask]) -> list[dict[str, Any]]: ...


def share_plan(run_dir: Path, iteration: int, games: int, shares: int) -> list[dict[str, Any]]:
    """The iteration's shares ({"worker", "games"}), pinned in its ``shares.json`` the first
    time: `games` split as evenly as possible over `shares` workers ``itN-sK``. A folder whose
    self-play started before without a plan (the in-process worker ``itN``) keeps that worker
    alone, so no game is played twice under two names."""
    path = iteration_folder(run_dir, iteration) / SHARES_FILE
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))["shares"]
    games_dir = iteration_folder(run_dir, iteration) / f"selfplay-{iteration:04d}"
    base = f"it{iteration:04d}"
    if games_dir.is_dir() and game_files(games_dir):
        plan = [{"worker": base, "games": games}]
    else:
        count = max(1, min(shares, games))
        plan = [{"worker": f"{base}-s{k:02d}", "games": games // count + (k < games % count)}
                for k in range(count)]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(json.dumps({"shares": plan}, indent=1), path)
    return plan


def counted(stage: Callable[..., dict]) -> Callable[..., dict]:
    """A stage whose summary also says its wall and CPU seconds over all its runs (see the
    module and `services.selfplay_loop.cost`); ``earlier_runs`` says what the runs before
    this one (killed ones) added, when there were any."""

    @functools.wraps(stage)
    def run(self: SelfPlayStages, iteration: int, folder: Path, history: list[dict]) -> dict:
        with CostLedger(stage_ledger(folder / COST_DIR, stage.__name__)) as ledger:
            summary = stage(self, iteration, folder, history)
            spent = ledger.now()
        remote = float(summary.pop("remote_cpu_seconds", 0.0))
        shares = [RunCost(**r) for r in summary.pop("earlier_share_runs", [])]
        before = earlier_cost(ledger.earlier, shares)
        extra = {"earlier_runs": before} if ledger.earlier or shares else {}
        return {**summary, **extra,
                "wall_seconds": round(spent.wall_seconds + before["wall_seconds"], 3),
                "cpu_seconds": round(spent.cpu_seconds + remote + before["cpu_seconds"], 3)}

    return run


class Ingest(Protocol):
    """The ingest of self-play folders into shards (the ingest flow): returns the manifest."""

    def __call__(self, *, sources: list[str], out_dir: str, work_dir: str,
                 board_size: int | None) -> dict: ...


def match_elo(wins: int, draws: int, losses: int) -> float | None:
    """The Elo difference the match's score says (logistic, no prior); None without games or
    at a score of 0 or 1, where it is unbounded."""
    games = wins + draws + losses
    if not games:
        return None
    score = (wins + draws / 2) / games
    if score <= 0 or score >= 1:
        return None
    return round(-400 * math.log10(1 / score - 1), 1)


def folder_stats(folder: Path) -> dict[str, Any]:
    """Games, rows (searched positions), full-search rows and results of a self-play folder,
    and its resignations: games that ended by one, and of the games played out regardless
    (`SelfPlaySettings.no_resign_share`) those that would have resigned (`resign_checked`) and
    how many of those the would-be resigner did not lose (`resign_wrong`: the false-positive
    rate is wrong / checked)."""
    games = rows = full = visits = resigned = checked = wrong = 0
    results = {"black": 0, "white": 0, "none": 0}
    for path in game_files(folder):
        data = json.loads(path.read_text(encoding="utf-8"))
        games += 1
        rows += len(data["moves"])
        full += sum(bool(m["full"]) for m in data["moves"])
        visits += sum(int(m["visits"]) for m in data["moves"])
        key = {BLACK: "black", WHITE: "white"}.get(data["winner"], "none")
        results[key] += 1
        resigned += data["end"] == END_RESIGNED
        if data["no_resign"] and data["would_resign"] is not None:
            checked += 1
            loser = data["would_resign"][1]
            wrong += data["winner"] != (WHITE if loser == BLACK else BLACK)
    return {"games": games, "rows": rows, "full_rows": full, "visits": visits,
            "wins": results,
            "mean_moves": round(rows / games, 1) if games else 0.0, "resigned": resigned,
            "resign_checked": checked, "resign_wrong": wrong,
            "resign_false_positive_rate": round(wrong / checked, 3) if checked else None}


def require_trainable(config: str, what: str) -> None:
    """ValueError when the trainer cannot train `config` by gradient: a network that takes
    other inputs than the game's stored boards and is served behind a wrapper (the Capture
    Game's sweep networks, trained by the policy search). `what` names where it comes from."""
    model = spec(config)
    if model.serve is not None:
        game = get_game(model.game)
        other = game.selfplay_config or "a configuration taking the game's boards"
        raise ValueError(f"{what} is a {config!r} network, which takes other inputs than the "
                         f"{game.title}'s boards and is not trained by gradient: the loop "
                         f"cannot train it; start from {other} (--config) in a model of its "
                         "own (--model-name) or from another --init-version")


def split_figures(metrics: dict) -> dict[str, Any]:
    """The figures of one evaluated split the loop records: loss, top-1, rows, and with a
    value head its MSE, the share of decisive results its sign names and its rows."""
    return {k: metrics[k] for k in ("loss", "top1", "n", "value_mse", "value_sign", "value_n")
            if k in metrics}


def held_out_value(history: list[dict]) -> list[dict[str, Any]]:
    """The value head on the held-out games at every evaluation of a training run: step,
    epoch, and per split of `HELD_OUT_GAMES` that was measured its value MSE, sign accuracy
    on decisive results and rows (empty without a value head)."""
    out = []
    for evaluation in history:
        splits = {split: {k: evaluation[split][k]
                          for k in ("value_mse", "value_sign", "value_n")}
                  for split in HELD_OUT_GAMES if "value_mse" in evaluation.get(split, {})}
        if splits:
            out.append({"step": evaluation["step"], "epoch": evaluation["epoch"], **splits})
    return out


def prior_selfplay(root: Path, game: Game) -> tuple[tuple[str, Path], ...]:
    """(label, folder) of every self-play folder under `root`, by path: the earlier runs'
    games a loop's window starts with (`LoopSettings.prior_games`). Each is labelled
    ``prior-`` and its path under `root` (every run names its folders alike, and a label
    names a source's rows). Refused: no such folder, none under it, one of another game."""
    if not root.is_dir():
        raise ValueError(f"--prior-games {root}: no such folder")
    folders = sorted(p.parent for p in root.rglob(GAMES_DIR) if p.is_dir())
    if not folders:
        raise ValueError(f"--prior-games {root}: no self-play folder (one holding "
                         f"{GAMES_DIR}/) under it")
    others = [str(f) for f in folders if folder_game(f) not in (game.name, None)]
    if others:
        raise ValueError(f"--prior-games {root}: not {game.title} games: {', '.join(others)}")
    return tuple(("prior-" + re.sub(r"[^A-Za-z0-9._-]", "_",
                                    "-".join(f.relative_to(root).parts or (root.name,))),
                  f.resolve()) for f in folders)


def prior_words(folders: int, rows: int) -> str:
    """The earlier runs' folders an ingest's window held (`LoopSettings.prior_games`), in
    words; nothing when it held none."""
    return f" and {folders} earlier folder(s) ({rows} rows)" if folders else ""


def served_weights(repository: Path, model_name: str, version: int, out: Path) -> str:
    """Write the network of a published version as a state_dict file (what `TrainConfig`'s
    `init_weights` reads) and return its configuration: the version's ``model.pt`` is its
    served module, whose state_dict is the network's under the served wrapper's names."""
    folder = version_dir(repository, model_name, version)
    meta = read_version_metadata(repository, model_name, version)
    config = (meta.get("model_config") or {}).get("name")
    if not config:
        raise ValueError(f"{folder}: its metadata names no network configuration "
                         "(model_config.name); give the loop another --init-version")
    require_trainable(config, f"{model_name} v{version}")
    net = network(config)
    spec(config).served(net).load_state_dict(
        torch.jit.load(str(folder / MODEL_FILE), map_location="cpu").state_dict())
    with atomic_path(out) as tmp:
        torch.save(net.state_dict(), tmp)
    return config


class SelfPlayStages:
    """The loop's stages (see the module). `ingest`: the ingest of self-play folders (the
    ingest flow); `on_progress`: one line per game and stage, for people; `play_shares`:
    where self-play shares run (None: every game in this process, as one worker), `shares`
    how many a new iteration's games are split into; `on_game(game_id, record)`: each game
    played in this process (metrics)."""

    def __init__(self, settings: LoopSettings, run_dir: str | Path, ingest: Ingest,
                 on_progress: Callable[[str], None] | None = None,
                 play_shares: PlayShares | None = None, shares: int = 1,
                 on_game: Callable[[str, Any], None] | None = None) -> None:
        self.settings = settings
        self.run_dir = Path(run_dir).resolve()
        self.ingest_sources = ingest
        self.say = on_progress or log.info
        self.play_shares = play_shares
        self.shares = shares
        self.on_game = on_game
        self.game: Game = get_game(settings.game)
        if record_suffix(self.game) not in self.game.record_formats:
            raise ValueError(f"{self.game.title} self-play cannot become training rows: the "
                             "ingest replays a game's records and it reads none "
                             f"(record formats: {self.game.record_formats or 'none'})")
        self.size = settings.board_size or self.game.default_size
        self.repository = Path(settings.repository)
        self.first_config = (settings.config or self.game.selfplay_config
                             or self.game.default_config)
        self._check_config(self.first_config, "the loop's first configuration")
        self.model = settings.model_name or self.game.model_name(spec(self.first_config).encoder)
        if settings.candidate_config:
            self._check_config(settings.candidate_config, "--candidate-config")
            encoder = spec(settings.candidate_config).encoder
            if self.game.model_name(encoder) != self.model:
                raise ValueError(f"--candidate-config {settings.candidate_config!r} takes the "
                                 f"{encoder!r} input, not that of {self.model}'s versions")
        self.prior_sources = (prior_selfplay(Path(settings.prior_games), self.game)
                              if settings.prior_games else ())
        own = [str(path) for _, path in self.prior_sources if path.is_relative_to(self.run_dir)]
        if own:  # its rows would be in the window twice
            raise ValueError(f"--prior-games {settings.prior_games} holds this run's own "
                             f"self-play folders: {', '.join(own)}")
        # read and checked once, here: a wrong file is refused before the first stage runs
        self.saved_openings: tuple[tuple[int, ...], ...] = (
            load_suite(Path(settings.opening_file), self.game, self.size).openings
            if settings.opening_file else ())

    # ------------------------------------------------------------------------- helpers
    def _check_config(self, config: str, what: str) -> None:
        """A configuration the loop trains must be trainable by gradient and of this game."""
        require_trainable(config, what)
        if spec(config).game != self.game.name:
            raise ValueError(f"{what} {config!r} is a {spec(config).game} network, not a "
                             f"{self.game.title} one")

    def _current(self, stage: str) -> dict:
        """The summary of a stage of the running iteration, as the loop recorded it."""
        return LoopState.load(self.run_dir).current.get(stage, {})

    def _games_dir(self, iteration: int) -> Path:
        return iteration_folder(self.run_dir, iteration) / f"selfplay-{iteration:04d}"

    def _set_serving(self, version: int, why: str) -> int | None:
        """Record `version` as serving in the rollout record; the version it replaced."""
        with rollout_lock(self.repository, self.model, LOCK_TIMEOUT_S):
            state = read_state(self.repository, self.model)
            before = state["current"]
            if before == version:
                return before
            if before is not None:
                state["previous"] = before
            state["current"] = version
            state["history"].append({"at": now_text(), "action": "rollout", "version": version,
                                     "serving": before, "outcome": "serving", "by": why})
            write_state(self.repository, self.model, state)
            return before

    def _require_trainable(self, version: int) -> None:
        """`require_trainable` for a published version, before it plays (its metadata's
        configuration; one that names none is refused by `served_weights` later)."""
        meta = read_version_metadata(self.repository, self.model, version) or {}
        config = (meta.get("model_config") or {}).get("name")
        if config:
            require_trainable(config, f"{self.model} v{version}")

    def _first_version(self) -> tuple[int, str]:
        """The version the first iteration plays with, and where it came from."""
        s = self.settings
        if s.init_version is not None:
            if s.init_version not in list_versions(self.repository, self.model):
                raise ValueError(f"{self.model} v{s.init_version} is not published in "
                                 f"{self.repository}")
            self._require_trainable(s.init_version)
            self._set_serving(s.init_version, "self-play loop: --init-version")
            return s.init_version, "init_version"
        if list_versions(self.repository, self.model):
            version = int(reference_version(self.repository, self.model))
            self._require_trainable(version)
            return version, "serving"
        version = publish_model(self.repository, game=self.game.name, config=self.first_config,
                                seed=s.seed, model_name=self.model)
        self._set_serving(version, "self-play loop: first version, seeded weights")
        return version, f"published {self.first_config} with weights from seed {s.seed}"

    def serving(self, iteration: int) -> int:
        """The version that serves during `iteration`, pinned in its ``serving.json`` at the
        iteration's start (a rerun after a kill plays, trains from and gates against the
        same one)."""
        path = iteration_folder(self.run_dir, iteration) / SERVING_FILE
        if path.exists():
            return int(json.loads(path.read_text())["version"])
        if iteration == 0:
            version, origin = self._first_version()
        else:
            version, origin = reference_version(self.repository, self.model), "serving"
            if version is None:
                raise ValueError(f"no {self.model} version in {self.repository}")
        atomic_write_text(json.dumps({"version": int(version), "from": origin}), path)
        return int(version)

    def candidate(self, iteration: int) -> tuple[int, dict] | None:
        """The candidate this run published in `iteration` (version, metadata), or None."""
        for version in reversed(list_versions(self.repository, self.model)):
            meta = read_version_metadata(self.repository, self.model, version)
            lineage = meta.get(LINEAGE_KEY) or {}
            if lineage.get("run") == str(self.run_dir) and lineage.get("iteration") == iteration:
                return version, meta
        return None

    @staticmethod
    def _played_by(version: int, history: list[dict]) -> list[dict]:
        """The finished iterations whose self-play `version` played."""
        return [h for h in history if h.get("selfplay", {}).get("serving_version") == version]

    def resign_threshold(self, iteration: int, serving: int,
                         history: list[dict]) -> dict[str, Any]:
        """The resign threshold `iteration`'s games, played by version `serving`, are played
        with and how it was chosen, pinned in its ``resign.json`` at the iteration's start (a
        rerun after a kill, here or on a worker, plays the rest of the games with the same
        one):

        * ``fixed``: `resign_fp_target` 0, or a self-play folder that began before a
          threshold was pinned (its games were played with it): the games' own setting;
        * ``played out``: the serving version played no finished iteration yet: every game
          is played out (``no_resign_share`` 1), so that its own games calibrate it. Another
          network's games do not: the first iteration of each new serving version resigned
          wrongly far above the target when its threshold came from its parent's games
          (Go 9x9: 10 of 33, 4 of 34, 5 of 20 checked; played out, 139 of 429; its later
          iterations 1 of 12, 1 of 13, 1 of 14). The pinned threshold (the previous one) only
          says what it would have done;
        * else `services.selfplay.resign.calibrate` over the played-out games of the newest
          `resign_iterations` finished iterations the serving version played, from the
          previous iteration's threshold: ``calibrated``, ``stricter`` or ``kept``."""
        s = self.settings
        path = iteration_folder(self.run_dir, iteration) / RESIGN_FILE
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8"))
        fixed = s.selfplay.resign_threshold
        previous = next((float(h["selfplay"]["resign_threshold"]) for h in reversed(history)
                         if "resign_threshold" in h.get("selfplay", {})), fixed)
        if not s.resign_fp_target or game_files(self._games_dir(iteration)):
            why = ("--resign-fp-target 0" if not s.resign_fp_target else
                   "the iteration's self-play began before a threshold was pinned")
            pinned: dict[str, Any] = {"threshold": fixed, "rule": "fixed", "why": why}
        elif not (own := self._played_by(serving, history)):
            pinned = {"threshold": previous, "rule": PLAYED_OUT, "no_resign_share": 1.0,
                      "why": f"v{serving} has no finished iteration yet"}
        else:
            recent = own[-s.resign_iterations:]
            games = [json.loads(p.read_text(encoding="utf-8"))
                     for h in recent for p in game_files(self._games_dir(h["iteration"]))]
            found = calibrate(games, target=s.resign_fp_target, after=s.selfplay.resign_after,
                              previous=previous)
            pinned = {**found.to_dict(), "iterations": [h["iteration"] for h in recent]}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(json.dumps(pinned, indent=1), path)
        self.say(f"iteration {iteration} self-play: resign below -{pinned['threshold']:.4f} "
                 f"({pinned['rule']})")
        return pinned

    def _share_tasks(self, iteration: int, serving: int,
                     played: SelfPlaySettings) -> list[ShareTask]:
        """The iteration's self-play as shares, its games played with `played`: one
        in-process worker ``itN`` (no `play_shares`, no plan pinned), else the pinned plan
        (`share_plan`)."""
        s = self.settings
        plies = s.opening_plies
        openings = self.saved_openings or (
            opening_suite(self.game, s.openings, size=self.size, plies=(min(2, plies), plies),
                          seed=s.seed) if plies else [()])
        planned = iteration_folder(self.run_dir, iteration) / SHARES_FILE
        if self.play_shares is None and not planned.exists():
            plan = [{"worker": f"it{iteration:04d}", "games": s.games}]
        else:
            plan = share_plan(self.run_dir, iteration, s.games, self.shares)
        return [ShareTask(game=self.game.name, size=self.size,
                          version_folder=str(version_dir(self.repository, self.model,
                                                         serving)),
                          out_dir=str(self._games_dir(iteration)), worker=p["worker"],
                          games=int(p["games"]), settings=played, seed=s.seed,
                          concurrency=s.concurrency,
                          openings=tuple(tuple(int(m) for m in o) for o in openings),
                          model_name=self.model, version=int(serving),
                          triton_url=s.selfplay_triton_url,
                          cost_dir=str(iteration_folder(self.run_dir, iteration) / COST_DIR))
                for p in plan]

    def _check_triton(self, serving: int) -> None:
        """`VersionNotReadyError` unless the serving version is ready on the self-play Triton:
        asked here once before any share starts (a share on a Dask worker would otherwise
        fail, and be retried, on each worker)."""
        from services.triton.pinned import open_pinned

        url = self.settings.selfplay_triton_url
        assert url is not None
        open_pinned(url, self.model, serving, self.game).close()

    # ------------------------------------------------------------------------- stages
    @counted
    def selfplay(self, iteration: int, folder: Path, history: list[dict]) -> dict:
        s = self.settings
        serving = self.serving(iteration)
        resign = self.resign_threshold(iteration, serving, history)
        played = dataclasses.replace(
            s.selfplay, resign_threshold=float(resign["threshold"]),
            no_resign_share=float(resign.get("no_resign_share", s.selfplay.no_resign_share)))
        tasks = self._share_tasks(iteration, serving, played)
        out = self._games_dir(iteration)
        started = time.perf_counter()
        count = {"n": 0}

        def on_game(game_id: str, record: Any) -> None:
            count["n"] += 1
            self.say(f"iteration {iteration} self-play: {game_id} ({count['n']} this run, "
                     f"{s.games} in all): {len(record.moves)} moves, {record.end}, winner "
                     f"{record.winner} [{time.perf_counter() - started:.0f} s]")
            if self.on_game is not None:
                self.on_game(game_id, record)

        if s.selfplay_triton_url is not None:
            self._check_triton(serving)
        if self.play_shares is None:
            reports = [play_share(task, on_game) for task in tasks]
        else:
            self.say(f"iteration {iteration} self-play: {len(tasks)} share(s) of "
                     f"{[t.games for t in tasks]} games on the flow's workers")
            reports = self.play_shares(tasks)
        stats = folder_stats(out)
        where = ({"evaluator": "triton", "triton_url": s.selfplay_triton_url}
                 if s.selfplay_triton_url is not None else {"evaluator": "local"})
        return {**stats, "serving_version": serving, **where,
                "resign_threshold": played.resign_threshold, "resign_calibration": resign,
                "played_now": sum(r["played"] for r in reports),
                "finished_before": sum(r["skipped"] for r in reports),
                "moves_now": sum(r["moves"] for r in reports),
                "visits_now": sum(r["visits"] for r in reports),
                "seconds": round(time.perf_counter() - started, 1), "folder": out.name,
                "shares": [{k: r[k] for k in ("worker", "played", "skipped", "seconds",
                                              "cpu_seconds")} for r in reports],
                "remote_cpu_seconds": sum(r["cpu_seconds"] for r in reports
                                          if r["process"] != process_identity()),
                "earlier_share_runs": [run for r in reports for run in r["earlier_runs"]]}

    @counted
    def ingest(self, iteration: int, folder: Path, history: list[dict]) -> dict:
        s = self.settings
        rows = [h["selfplay"]["rows"] for h in history]
        rows.append(self._current("selfplay").get("rows") or folder_stats(
            self._games_dir(iteration))["rows"])
        prior = [folder_stats(path)["rows"] for _, path in self.prior_sources]
        # the earlier runs' folders are older than iteration 0: the window takes the newest
        made = prior + rows
        first, want = window_iterations(made, s.window_min_rows, s.window_expand,
                                        s.window_exponent)
        held = self.prior_sources[first:]
        own_first = max(0, first - len(prior))
        sources = ([f"{label}={path}" for label, path in held]
                   + [str(self._games_dir(i)) for i in range(own_first, iteration + 1)])
        prior_rows = sum(prior[first:])
        self.say(f"iteration {iteration} ingest: the window holds iterations {own_first}.."
                 f"{iteration}{prior_words(len(held), prior_rows)} ({sum(made[first:])} rows; "
                 f"window({sum(made)}) = {want})")
        manifest = self.ingest_sources(sources=sources, out_dir=str(folder / "dataset"),
                                       work_dir=str(self.run_dir / "ingest.work"),
                                       board_size=self.size)
        return {"rows": manifest["rows"], "splits": manifest["splits"],
                "new_rows": rows[-1], "total_rows": sum(made),
                "window_rows": want, "window_first_iteration": own_first,
                "prior_sources": len(held), "prior_rows": prior_rows, "sources": len(sources),
                "quarantined": sum(c.get("quarantined", 0) for c in manifest["counts"])}

    @counted
    def train(self, iteration: int, folder: Path, history: list[dict]) -> dict:
        s = self.settings
        found = self.candidate(iteration)
        if found is not None:  # published before a kill: not again
            version, meta = found
            self.say(f"iteration {iteration} train: v{version} was published before; kept")
            return {**meta[LINEAGE_KEY]["summary"], "candidate_version": version}
        serving = self.serving(iteration)
        ingested = self._current("ingest")
        dataset = folder / "dataset"
        new_rows = int(ingested.get("new_rows", 0))
        train_rows = int(ingested.get("splits", {}).get("train", 0))
        if s.candidate_config:  # a fresh network: several passes over the whole window
            config, init, per = s.candidate_config, None, train_rows
            start = f"fresh {config} weights"
        else:  # the serving network trained on: a few samples per new row
            weights = folder / WEIGHTS_FILE
            config = served_weights(self.repository, self.model, serving, weights)
            init, per, start = str(weights), new_rows, f"v{serving}'s weights"
        batch = max(1, min(s.batch_size, train_rows))
        steps = max(1, min(s.train_steps, int(s.samples_per_row * per // batch)))
        recipe = TrainConfig(model=config, batch_size=batch, learning_rate=s.learning_rate,
                             lr_schedule=s.lr_schedule, max_steps=steps,
                             seed=s.seed + iteration, init_weights=init,
                             checkpoint_every=max(1, steps // 4),
                             curve_every=max(1, steps // 20), value_per_game=s.value_per_game,
                             expert_dataset=s.expert_dataset, expert_share=s.expert_share,
                             num_threads=s.train_threads)
        self.say(f"iteration {iteration} train: {steps} steps of {batch} rows from {start} "
                 f"({new_rows} new rows, {train_rows} train rows)")
        (folder / "train").mkdir(exist_ok=True)
        threads = torch.get_num_threads()
        try:
            result = train(dataset, recipe, checkpoint=folder / "train" / "checkpoint.pt")
        finally:  # the process's own setting back for the stages after (self-play in it)
            torch.set_num_threads(threads)
        m = result.metrics
        summary = {
            "steps": m["steps"], "batch_size": batch, "samples": m["steps"] * batch,
            "parent_version": serving, "config": config, "stopped": m["stopped"],
            "init": "fresh" if init is None else "serving",
            "first_loss": result.curve[0]["loss"] if result.curve else None,
            "last_loss": result.curve[-1]["loss"] if result.curve else None,
            "losses": {split: split_figures(m[split]) for split in EVALUATED_SPLITS
                       if m.get(split)},
            "held_out_value": held_out_value(result.history),
            "expert_share": s.expert_share, "value_per_game": s.value_per_game,
        }
        lineage = {"run": str(self.run_dir), "iteration": iteration, "parent": serving}
        version = publish_network(
            result.model, config, self.repository, self.model, dataset_dir=dataset,
            recipe=recipe, metrics=m, metrics_source="the training run's final evaluation",
            source=f"self-play loop {self.run_dir}, iteration {iteration}",
            metadata={LINEAGE_KEY: {**lineage, "summary": summary}})
        summary["candidate_version"] = version
        self.say(f"iteration {iteration} train: published {self.model} v{version}")
        return summary

    @counted
    def gate(self, iteration: int, folder: Path, history: list[dict]) -> dict:
        s = self.settings
        serving = self.serving(iteration)
        version = self._current("train").get("candidate_version")
        if version is None:
            found = self.candidate(iteration)
            if found is None:
                raise ValueError(f"iteration {iteration} has no candidate to gate")
            version = found[0]
        count = {"n": 0}
        started = time.perf_counter()

        def on_game(entry: dict) -> None:
            count["n"] += 1
            self.say(f"iteration {iteration} gate: "
                     + progress_line(entry, count["n"], s.gate_max_games, started))

        decision = gate_by_match(self.repository, self.game, int(version),
                                 model_name=self.model, serving=serving, visits=s.gate_visits,
                                 max_games=s.gate_max_games, out_dir=folder / "gate",
                                 jobs=s.gate_jobs, seed=s.seed + iteration, size=self.size,
                                 elo0=s.elo0, elo1=s.elo1, alpha=s.alpha, beta=s.beta,
                                 suite=self.saved_openings, on_game=on_game)
        elo = match_elo(decision.wins, decision.draws, decision.losses)
        self.say(f"iteration {iteration} gate: v{version} {decision.verdict}: "
                 f"{decision.reason}")
        summary = decision.to_dict()
        # "games" counts self-play games in the loop's record: the match's are its own
        summary["match_games"] = summary.pop("games")
        return {**summary, "elo": elo}

    @counted
    def rollout(self, iteration: int, folder: Path, history: list[dict]) -> dict:
        s = self.settings
        gated = self._current("gate")
        serving = self.serving(iteration)
        version = gated.get("candidate_version")
        if not gated.get("passed"):
            return {"rolled_out": False, "serving": serving, "mode": "none",
                    "reason": f"v{version} did not pass the gate; v{serving} stays"}
        if s.triton_url is None:
            before = self._set_serving(int(version), "self-play loop (no Triton: the record)")
            self.say(f"iteration {iteration} rollout: v{version} serves (was v{before})")
            return {"rolled_out": True, "serving": int(version), "mode": "record",
                    "replaced": before}
        return self._triton_rollout(iteration, int(version), serving)

    def _triton_rollout(self, iteration: int, version: int, serving: int) -> dict:
        """Roll `version` out on the Triton at `triton_url`, as ``movepred rollout`` does; a
        version already serving there (a rerun) is left as it is."""
        from services.triton.client import PolicyClient, TritonError
        from services.triton.rollout import RolloutError, rollout

        if read_state(self.repository, self.model)["current"] == version:
            return {"rolled_out": True, "serving": version, "mode": "triton", "replaced": None}
        client = PolicyClient(self.settings.triton_url, self.model)
        try:
            report = rollout(client, self.repository, version, self.model)
        except (RolloutError, TritonError, TimeoutError) as exc:
            self.say(f"iteration {iteration} rollout: v{version} refused: {exc}")
            return {"rolled_out": False, "serving": read_state(
                self.repository, self.model)["current"], "mode": "triton",
                "reason": str(exc)}
        finally:
            client.close()
        return {"rolled_out": True, "serving": version, "mode": "triton",
                "replaced": serving, "report": report.to_dict()}


__all__ = ["LINEAGE_KEY", "RESIGN_FILE", "SHARES_FILE", "Ingest", "LoopSettings", "PlayShares",
           "SelfPlayStages", "ShareTask", "folder_stats", "match_elo", "play_share",
           "require_trainable", "served_weights", "share_evaluator", "share_plan"]
