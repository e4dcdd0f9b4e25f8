"""The self-play loop's stages for any registered game: play, ingest, train, gate, roll out.

`SelfPlayStages` implements `services.selfplay.loop.Stages` from one `LoopSettings`; the loop
(`run_loop`) runs them in order and records each summary in ``loop.json``. One iteration:

1. **selfplay**: the serving version (pinned for the iteration in ``serving.json``: the
   rollout record's ``current``, else the newest version) plays `games` games in this process
   (`LocalEvaluator`, `run_worker`) into ``iter-N/selfplay-N/``, from an opening suite. The
   first iteration needs a version: `init_version` (recorded as serving), else the version
   the repository serves, else the game's default configuration (or `config`) with weights
   drawn from `seed`, published by `publish_model` and recorded as serving.
2. **ingest**: the replay window (`services.selfplay_loop.window`, KataGo's rule) picks the
   newest iterations' self-play folders; the injected `ingest` (the ingest flow) writes them
   as shards with policy targets into ``iter-N/dataset/``.
3. **train**: from the serving network's weights (`TrainConfig.init_weights`, extracted from
   its ``model.pt``), for min(`train_steps`, `samples_per_row` x new rows / batch) steps
   (KataGo's max-train-bucket-per-new-data: each new row is seen about 4 times), then the
   candidate is published (`publish_network`) with its lineage under ``selfplay_loop`` in its
   metadata.
4. **gate**: `gate_by_match`, an SPRT match of the candidate against the iteration's serving
   version at `gate_visits`, at most `gate_max_games` games; a candidate that fails (or is
   undecided at the cap) is quarantined and the serving version stays.
5. **rollout**: a passed candidate becomes the serving version: without `triton_url`, in the
   repository's rollout record (``rollout.json``: the next iteration's self-play uses it);
   with it, rolled out on that Triton (`services.triton.rollout.rollout`, as ``movepred
   rollout`` does; a refusal keeps the serving version).

Kill-safety (the loop reruns the stage that was running): self-play plays only the missing
games; the ingest rewrites its manifest whole from the same folders; training resumes from its
checkpoint, and a candidate published before the kill is found by its lineage, never
published twice; the gate's match log skips finished games (a quarantined candidate is
recognised); the rollout does nothing when the candidate already serves.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from services.atomic_files import atomic_path, atomic_write_text
from services.defaults import MODEL_FILE
from services.games.base import BLACK, WHITE, Game
from services.games.registry import default_game, get_game, registered_games
from services.match.cli import progress_line
from services.match.gate import DEFAULT_GATE_VISITS, DEFAULT_MAX_GAMES, gate_by_match
from services.models.configs import spec
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
from services.selfplay.openings import opening_suite
from services.selfplay.pairs import game_files
from services.selfplay.play import END_RESIGNED
from services.selfplay.records import record_suffix
from services.selfplay.settings import SelfPlaySettings
from services.selfplay.worker import DEFAULT_CONCURRENCY, run_worker
from services.selfplay_loop.window import (
    DEFAULT_EXPAND,
    DEFAULT_EXPONENT,
    DEFAULT_MIN_ROWS,
    window_iterations,
)
from services.settings import DEFAULT_REPOSITORY, check_settings, setting
from services.trainer.publish import publish_model, publish_network
from services.trainer.train import TrainConfig, train

log = logging.getLogger(__name__)

LINEAGE_KEY = "selfplay_loop"  # a candidate's metadata entry: run folder, iteration, parent
SERVING_FILE = "serving.json"
WEIGHTS_FILE = "serving-weights.pt"
LOCK_TIMEOUT_S = 300.0
KATAGO_SAMPLES_PER_ROW = 4.0  # KataGo's max-train-bucket-per-new-data


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
    seed: int = setting(0, "seed of the games, the openings, the first network and training",
                        minimum=0)
    repository: str = setting(DEFAULT_REPOSITORY, "model repository the versions live in")
    model_name: str | None = setting(None, "model name in the repository (default: the "
                                           "game's model for the network's input)")
    config: str | None = setting(None, "network configuration of the first version when the "
                                       "repository has none (default: the game's default)")
    init_version: int | None = setting(None, "the version the first iteration plays with "
                                             "(recorded as serving; default: the serving "
                                             "one, else a seeded new one)", minimum=1)
    train_steps: int = setting(1000, "most training steps an iteration takes", minimum=1)
    batch_size: int = setting(256, "training rows a step (at most the window's train rows)",
                              minimum=1)
    learning_rate: float = setting(0.001, "Adam's learning rate", minimum=0)
    samples_per_row: float = setting(
        KATAGO_SAMPLES_PER_ROW, "most training samples per new self-play row (KataGo's "
                                "max-train-bucket-per-new-data)", minimum=0)
    window_min_rows: int = setting(DEFAULT_MIN_ROWS, "replay window: every row while the "
                                   "loop has made fewer, then KataGo's taper", minimum=1)
    window_expand: float = setting(DEFAULT_EXPAND, "replay window's growth per row at "
                                   "window-min-rows", minimum=0)
    window_exponent: float = setting(DEFAULT_EXPONENT, "replay window's taper exponent",
                                     minimum=0.01, maximum=1)
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
    triton_url: str | None = setting(None, "a running Triton to roll passed versions out on "
                                           "(default: record them as serving in the "
                                           "repository's rollout record only)")
    selfplay: SelfPlaySettings = field(default_factory=SelfPlaySettings,
                                       metadata={"help": "how games are played", "cli": False})

    def __post_init__(self) -> None:
        check_settings(self)


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
    games = rows = full = resigned = checked = wrong = 0
    results = {"black": 0, "white": 0, "none": 0}
    for path in game_files(folder):
        data = json.loads(path.read_text(encoding="utf-8"))
        games += 1
        rows += len(data["moves"])
        full += sum(bool(m["full"]) for m in data["moves"])
        key = {BLACK: "black", WHITE: "white"}.get(data["winner"], "none")
        results[key] += 1
        resigned += data["end"] == END_RESIGNED
        if data["no_resign"] and data["would_resign"] is not None:
            checked += 1
            loser = data["would_resign"][1]
            wrong += data["winner"] != (WHITE if loser == BLACK else BLACK)
    return {"games": games, "rows": rows, "full_rows": full, "wins": results,
            "mean_moves": round(rows / games, 1) if games else 0.0, "resigned": resigned,
            "resign_checked": checked, "resign_wrong": wrong,
            "resign_false_positive_rate": round(wrong / checked, 3) if checked else None}


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
    net = network(config)
    spec(config).served(net).load_state_dict(
        torch.jit.load(str(folder / MODEL_FILE), map_location="cpu").state_dict())
    with atomic_path(out) as tmp:
        torch.save(net.state_dict(), tmp)
    return config


class SelfPlayStages:
    """The loop's stages (see the module). `ingest`: the ingest of self-play folders (the
    ingest flow); `on_progress`: one line per game and stage, for people."""

    def __init__(self, settings: LoopSettings, run_dir: str | Path, ingest: Ingest,
                 on_progress: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.run_dir = Path(run_dir).resolve()
        self.ingest_sources = ingest
        self.say = on_progress or log.info
        self.game: Game = get_game(settings.game)
        if record_suffix(self.game) not in self.game.record_formats:
            raise ValueError(f"{self.game.title} self-play cannot become training rows: the "
                             "ingest replays a game's records and it reads none "
                             f"(record formats: {self.game.record_formats or 'none'})")
        self.size = settings.board_size or self.game.default_size
        self.repository = Path(settings.repository)
        self.first_config = settings.config or self.game.default_config
        if spec(self.first_config).game != self.game.name:
            raise ValueError(f"{self.first_config!r} is a {spec(self.first_config).game} "
                             f"network, not a {self.game.title} one")
        self.model = settings.model_name or self.game.model_name(spec(self.first_config).encoder)

    # ------------------------------------------------------------------------- helpers
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

    def _first_version(self) -> tuple[int, str]:
        """The version the first iteration plays with, and where it came from."""
        s = self.settings
        if s.init_version is not None:
            if s.init_version not in list_versions(self.repository, self.model):
                raise ValueError(f"{self.model} v{s.init_version} is not published in "
                                 f"{self.repository}")
            self._set_serving(s.init_version, "self-play loop: --init-version")
            return s.init_version, "init_version"
        if list_versions(self.repository, self.model):
            return int(reference_version(self.repository, self.model)), "serving"
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

    # ------------------------------------------------------------------------- stages
    def selfplay(self, iteration: int, folder: Path, history: list[dict]) -> dict:
        s = self.settings
        serving = self.serving(iteration)
        evaluator = LocalEvaluator.from_version_folder(
            version_dir(self.repository, self.model, serving))
        plies = s.opening_plies
        openings = opening_suite(self.game, s.openings, size=self.size,
                                 plies=(min(2, plies), plies), seed=s.seed) if plies else [()]
        out = self._games_dir(iteration)
        started = time.perf_counter()
        count = {"n": 0}

        def on_game(game_id: str, record: Any) -> None:
            count["n"] += 1
            self.say(f"iteration {iteration} self-play: {game_id} ({count['n']} this run, "
                     f"{s.games} in all): {len(record.moves)} moves, {record.end}, winner "
                     f"{record.winner} [{time.perf_counter() - started:.0f} s]")

        report = run_worker(self.game, evaluator, out, games=s.games, settings=s.selfplay,
                            worker=f"it{iteration:04d}", seed=s.seed,
                            concurrency=s.concurrency, size=self.size, openings=openings,
                            on_game=on_game)
        stats = folder_stats(out)
        return {**stats, "serving_version": serving, "played_now": len(report.played),
                "finished_before": report.skipped, "seconds": round(report.seconds, 1),
                "folder": out.name}

    def ingest(self, iteration: int, folder: Path, history: list[dict]) -> dict:
        s = self.settings
        rows = [h["selfplay"]["rows"] for h in history]
        rows.append(self._current("selfplay").get("rows") or folder_stats(
            self._games_dir(iteration))["rows"])
        first, want = window_iterations(rows, s.window_min_rows, s.window_expand,
                                        s.window_exponent)
        sources = [str(self._games_dir(i)) for i in range(first, iteration + 1)]
        self.say(f"iteration {iteration} ingest: the window holds iterations {first}.."
                 f"{iteration} ({sum(rows[first:])} rows; window({sum(rows)}) = {want})")
        manifest = self.ingest_sources(sources=sources, out_dir=str(folder / "dataset"),
                                       work_dir=str(self.run_dir / "ingest.work"),
                                       board_size=self.size)
        return {"rows": manifest["rows"], "splits": manifest["splits"],
                "new_rows": rows[-1], "total_rows": sum(rows), "window_rows": want,
                "window_first_iteration": first, "sources": len(sources),
                "quarantined": sum(c.get("quarantined", 0) for c in manifest["counts"])}

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
        weights = folder / WEIGHTS_FILE
        config = served_weights(self.repository, self.model, serving, weights)
        new_rows = int(ingested.get("new_rows", 0))
        train_rows = int(ingested.get("splits", {}).get("train", 0))
        batch = max(1, min(s.batch_size, train_rows))
        steps = max(1, min(s.train_steps, int(s.samples_per_row * new_rows // batch)))
        recipe = TrainConfig(model=config, batch_size=batch, learning_rate=s.learning_rate,
                             max_steps=steps, seed=s.seed + iteration,
                             init_weights=str(weights), checkpoint_every=max(1, steps // 4),
                             curve_every=max(1, steps // 20))
        self.say(f"iteration {iteration} train: {steps} steps of {batch} rows from v{serving}'s "
                 f"weights ({new_rows} new rows, {train_rows} train rows)")
        (folder / "train").mkdir(exist_ok=True)
        result = train(dataset, recipe, checkpoint=folder / "train" / "checkpoint.pt")
        m = result.metrics
        summary = {
            "steps": m["steps"], "batch_size": batch, "samples": m["steps"] * batch,
            "parent_version": serving, "config": config, "stopped": m["stopped"],
            "first_loss": result.curve[0]["loss"] if result.curve else None,
            "last_loss": result.curve[-1]["loss"] if result.curve else None,
            "losses": {split: {k: m[split][k] for k in ("loss", "top1", "value_mse", "n")
                               if k in m[split]}
                       for split in ("train", "validation") if m.get(split)},
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
                                 on_game=on_game)
        elo = match_elo(decision.wins, decision.draws, decision.losses)
        self.say(f"iteration {iteration} gate: v{version} {decision.verdict}: "
                 f"{decision.reason}")
        summary = decision.to_dict()
        # "games" counts self-play games in the loop's record: the match's are its own
        summary["match_games"] = summary.pop("games")
        return {**summary, "elo": elo}

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


__all__ = ["LINEAGE_KEY", "Ingest", "LoopSettings", "SelfPlayStages", "folder_stats",
           "match_elo", "served_weights"]
