"""Prometheus metrics of the self-play loop, served from the loop's own process.

Why from the loop process: every figure is already there, in the stages' summaries as
``loop.json`` records them (`services.selfplay_loop.stages`) and in each game played in the
process; a scrape endpoint of the flow process needs no push gateway and no text files.
Every `LoopMetrics` owns its own `CollectorRegistry` (several can live in one process, as in
the tests, beside the search service's); `serve()` exposes it with
`prometheus_client.start_http_server`, on loopback unless told otherwise. The flow turns it
on with ``--metrics-port`` (off by default). At start `load` sets the gauges from the run
folder's record, so a resumed loop shows its history at once; the counters count this
process's work only (Prometheus's `rate` handles the reset of a restart).

Series (all prefixed ``movepred_``, label ``game``):

* ``selfplay_games_total``, ``selfplay_moves_total``, ``selfplay_visits_total``: self-play
  games finished, their searched moves, and the root visits the moves were chosen with
  (reused ones included). Games played in this process count as they finish; a share played
  elsewhere (a Dask worker) counts when its stage ends. Games/hour:
  ``3600 * rate(movepred_selfplay_games_total[1h])``; visits/s:
  ``rate(movepred_selfplay_visits_total[5m])``.
* ``selfplay_games_per_hour``, ``selfplay_visits_per_second``: the same of the last finished
  self-play stage (games and visits played in it over its wall time).
* ``selfplay_game_moves``: mean searched moves a game of the last self-play stage's folder.
* ``selfplay_resign_false_positive_rate``: of the last iteration's games played out although a
  side would have resigned, the share that side did not lose (NaN when none was);
  ``selfplay_resign_checked`` and ``selfplay_resign_wrong`` its counts;
  ``selfplay_resign_threshold``: the threshold its games resigned at (resign below minus it;
  fixed or calibrated, `services.selfplay.resign`).
* ``train_policy_loss{split}``, ``train_value_mse{split}``, ``train_top1{split}``: the last
  candidate's final evaluation (policy cross-entropy on the played move, value MSE, top-1)
  on the window's train and validation rows; ``train_batch_loss{point}``: its first and last
  mini-batch loss (policy + value).
* ``loop_version_elo{version}``: Elo of each gated version relative to the loop's first
  serving version (0), chained through the gates' match scores (a candidate's Elo is its
  serving version's plus the gate's difference); ``gate_elo{version}``: the gate's difference
  alone, ``gate_passed{version}`` 1 or 0.
* ``loop_iteration`` (the running one), ``loop_serving_version``,
  ``loop_stage_seconds_total{stage}`` and ``loop_stage_cpu_seconds_total{stage}`` (wall and
  CPU time of the stages finished by this process).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from services.selfplay.loop import STAGES, LoopState

SPLITS = ("train", "validation")


@dataclass
class MetricsEndpoint:
    """A running metrics endpoint; `close()` stops it."""

    server: Any
    thread: threading.Thread
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


class LoopMetrics:
    """The loop's series (see the module) in a registry of their own."""

    def __init__(self, game: str) -> None:
        self.game = game
        self.registry = CollectorRegistry()
        r, g = self.registry, ["game"]
        self.games = Counter("movepred_selfplay_games", "self-play games finished", g,
                             registry=r)
        self.moves = Counter("movepred_selfplay_moves", "searched moves of self-play games",
                             g, registry=r)
        self.visits = Counter("movepred_selfplay_visits", "root visits of self-play moves "
                              "(reused visits included)", g, registry=r)
        self.games_per_hour = Gauge("movepred_selfplay_games_per_hour",
                                    "games per hour of the last self-play stage", g, registry=r)
        self.visits_per_second = Gauge("movepred_selfplay_visits_per_second",
                                       "root visits per second of the last self-play stage",
                                       g, registry=r)
        self.game_moves = Gauge("movepred_selfplay_game_moves",
                                "mean searched moves a game, last self-play stage", g,
                                registry=r)
        self.resign_rate = Gauge("movepred_selfplay_resign_false_positive_rate",
                                 "share of would-be resignations (games played out) the "
                                 "resigner did not lose, last iteration", g, registry=r)
        self.resign_checked = Gauge("movepred_selfplay_resign_checked",
                                    "games played out although a side would have resigned, "
                                    "last iteration", g, registry=r)
        self.resign_wrong = Gauge("movepred_selfplay_resign_wrong",
                                  "of those, games the would-be resigner did not lose", g,
                                  registry=r)
        self.resign_threshold = Gauge("movepred_selfplay_resign_threshold",
                                      "resign threshold of the last self-play stage (a side "
                                      "resigns below minus it)", g, registry=r)
        self.policy_loss = Gauge("movepred_train_policy_loss", "last candidate: policy "
                                 "cross-entropy on the played move", [*g, "split"], registry=r)
        self.value_mse = Gauge("movepred_train_value_mse", "last candidate: value head MSE",
                               [*g, "split"], registry=r)
        self.top1 = Gauge("movepred_train_top1", "last candidate: top-1 on the played move",
                          [*g, "split"], registry=r)
        self.batch_loss = Gauge("movepred_train_batch_loss", "last candidate's training: "
                                "first and last mini-batch loss (policy + value)",
                                [*g, "point"], registry=r)
        self.version_elo = Gauge("movepred_loop_version_elo", "Elo relative to the loop's "
                                 "first serving version, chained through the gates",
                                 [*g, "version"], registry=r)
        self.gate_elo = Gauge("movepred_gate_elo", "the gate's Elo difference of a candidate "
                              "over its serving version", [*g, "version"], registry=r)
        self.gate_passed = Gauge("movepred_gate_passed", "1 when the candidate passed its gate",
                                 [*g, "version"], registry=r)
        self.iteration = Gauge("movepred_loop_iteration", "the loop's running iteration", g,
                               registry=r)
        self.serving = Gauge("movepred_loop_serving_version", "the version self-play plays", g,
                             registry=r)
        self.stage_seconds = Counter("movepred_loop_stage_seconds",
                                     "wall seconds of finished stages", [*g, "stage"],
                                     registry=r)
        self.stage_cpu = Counter("movepred_loop_stage_cpu_seconds",
                                 "CPU seconds of finished stages (this process, its children "
                                 "and the self-play shares' workers)", [*g, "stage"],
                                 registry=r)
        self._elo: dict[int, float] = {}
        self.endpoint: MetricsEndpoint | None = None  # while `serve` serves
        self._lock = threading.Lock()
        self._counted = {"games": 0, "moves": 0, "visits": 0}  # this stage, game by game
        for stage in STAGES:  # every stage's series exists from the start
            self.stage_seconds.labels(game, stage)
            self.stage_cpu.labels(game, stage)
        for counter in (self.games, self.moves, self.visits):
            counter.labels(game)

    # ------------------------------------------------------------------------- updates
    def game_played(self, game_id: str, record: Any) -> None:
        """A game played in this process (`SelfPlayStages`'s `on_game`; thread-safe)."""
        moves = len(record.moves)
        visits = sum(int(m.visits) for m in record.moves)
        with self._lock:
            self.games.labels(self.game).inc()
            self.moves.labels(self.game).inc(moves)
            self.visits.labels(self.game).inc(visits)
            self._counted["games"] += 1
            self._counted["moves"] += moves
            self._counted["visits"] += visits

    def stage_finished(self, iteration: int, stage: str, summary: dict, *,
                       count: bool = True) -> None:
        """A stage's summary (`run_loop`'s `on_stage`); `count` False: a recorded one, whose
        work is not this process's (`load`)."""
        game = self.game
        self.iteration.labels(game).set(iteration + (stage == STAGES[-1]))
        if count:
            self.stage_seconds.labels(game, stage).inc(float(summary.get("wall_seconds", 0)))
            self.stage_cpu.labels(game, stage).inc(float(summary.get("cpu_seconds", 0)))
        getattr(self, f"_{stage}")(summary, count)

    def load(self, state: LoopState) -> None:
        """The gauges from a run folder's record (finished iterations, then the running one)."""
        for record in state.history:
            for stage in STAGES:
                self.stage_finished(record["iteration"], stage, record[stage], count=False)
        for stage in state.done:
            self.stage_finished(state.iteration, stage, state.current[stage], count=False)
        self.iteration.labels(self.game).set(state.iteration)

    # ------------------------------------------------------------------------- stages
    def _selfplay(self, s: dict, count: bool) -> None:
        game = self.game
        self.serving.labels(game).set(s["serving_version"])
        if not self._elo:  # the loop's first serving version is the Elo origin
            self._elo[int(s["serving_version"])] = 0.0
        played, seconds = int(s.get("played_now", 0)), float(s.get("seconds") or 0)
        if played and seconds > 0:
            self.games_per_hour.labels(game).set(played / seconds * 3600)
            if "visits_now" in s:
                self.visits_per_second.labels(game).set(s["visits_now"] / seconds)
        self.game_moves.labels(game).set(float(s.get("mean_moves", 0)))
        checked, wrong = int(s.get("resign_checked", 0)), int(s.get("resign_wrong", 0))
        self.resign_checked.labels(game).set(checked)
        self.resign_wrong.labels(game).set(wrong)
        self.resign_rate.labels(game).set(wrong / checked if checked else math.nan)
        if s.get("resign_threshold") is not None:
            self.resign_threshold.labels(game).set(float(s["resign_threshold"]))
        if count:  # a share played elsewhere: its games count now
            with self._lock:
                done = dict(self._counted)
                self._counted = {"games": 0, "moves": 0, "visits": 0}
            self.games.labels(game).inc(max(0, played - done["games"]))
            self.moves.labels(game).inc(max(0, int(s.get("moves_now", 0)) - done["moves"]))
            self.visits.labels(game).inc(max(0, int(s.get("visits_now", 0)) - done["visits"]))

    def _ingest(self, s: dict, count: bool) -> None:
        pass  # its figures (rows, the window) are in the stage counters and the artifacts

    def _train(self, s: dict, count: bool) -> None:
        game = self.game
        for split in SPLITS:
            figures = (s.get("losses") or {}).get(split) or {}
            for gauge, key in ((self.policy_loss, "loss"), (self.value_mse, "value_mse"),
                               (self.top1, "top1")):
                if figures.get(key) is not None:
                    gauge.labels(game, split).set(float(figures[key]))
        for point in ("first", "last"):
            if s.get(f"{point}_loss") is not None:
                self.batch_loss.labels(game, point).set(float(s[f"{point}_loss"]))

    def _gate(self, s: dict, count: bool) -> None:
        game = self.game
        version, serving = str(s["candidate_version"]), int(s["serving_version"])
        base = self._elo.setdefault(serving, 0.0)
        self.gate_passed.labels(game, version).set(1.0 if s.get("passed") else 0.0)
        if s.get("elo") is not None:
            self.gate_elo.labels(game, version).set(float(s["elo"]))
            self._elo[int(version)] = base + float(s["elo"])
        self.version_elo.labels(game, str(serving)).set(base)
        if int(version) in self._elo:
            self.version_elo.labels(game, version).set(self._elo[int(version)])

    def _rollout(self, s: dict, count: bool) -> None:
        if s.get("serving") is not None:
            self.serving.labels(self.game).set(s["serving"])

    # ------------------------------------------------------------------------- serving
    def serve(self, port: int, host: str = "127.0.0.1") -> MetricsEndpoint:
        """Serve the registry on `host`:`port` (0: any free port) until `close()`."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self.endpoint = MetricsEndpoint(server, thread, host, server.server_port)
        return self.endpoint


__all__ = ["LoopMetrics", "MetricsEndpoint"]
