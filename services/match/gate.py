"""The gate as a match: is a candidate version stronger than the one that serves?

Why a match: the expert top-1 (`services.repository.gate`) says a network predicts human moves
as well as before, not that it plays better; a self-play loop must keep a network only when it
wins. As Leela Zero's server does, the candidate plays the serving version (the rollout
record's ``current``, else the newest published version but the candidate: `serving_version`)
at the same fixed visits, on the match runner's suite (each opening twice, colours swapped),
and a sequential probability ratio test (`services.ratings.sprt`: elo0 0, elo1 35,
alpha = beta = 0.05) stops the match as soon as it is decided; `max_games` caps the undecided
ones.

`gate_by_match` returns the decision and acts on it:

* passed: the candidate goes on to the rollout as today (`services.triton.rollout.rollout`,
  when given a Triton client; otherwise the decision says it is ready and the caller rolls it
  out);
* failed or undecided at the cap: the candidate is quarantined
  (`services.repository.quarantine`, action ``gate``) with the match as its reason.

Either way the candidate's model card gets ``match_gate`` (verdict, W-D-L, LLR, games, log);
its expert top-1 stays on the card. The games go to the gate's own folder (one per candidate and
opponent), never to a ratings log: they are played at the gate's budget and stop early. The
folder makes the gate resumable: a killed gate run again replays only the missing games.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from services.defaults import METADATA_FILE, MODEL_FILE
from services.games.base import Game
from services.games.registry import get_game
from services.match.results import record
from services.match.runner import MatchConfig, run_match
from services.match.specs import resolve
from services.ratings.sprt import (
    DEFAULT_ALPHA,
    DEFAULT_BETA,
    DEFAULT_ELO0,
    DEFAULT_ELO1,
    SprtResult,
    Verdict,
    sprt,
)
from services.repository.model_card import update_card
from services.repository.quarantine import quarantine
from services.repository.rollout_state import now_text, read_state
from services.repository.versions import QUARANTINE_DIR, list_versions, version_dir
from services.settings import ROOT

log = logging.getLogger(__name__)

DEFAULT_GATE_VISITS = 200
DEFAULT_MAX_GAMES = 400  # Leela Zero's cap
DEFAULT_GATE_DIR = ROOT / "runs" / "gate"


@dataclass(frozen=True)
class MatchGateDecision:
    """The gate's verdict on `candidate_version` against `serving_version` (None: nothing
    served, the candidate passes unplayed). `quarantined`: where a refused candidate went;
    `rollout`: the rollout's report or refusal when the gate rolled a passed one out."""

    passed: bool
    verdict: str
    reason: str
    model_name: str
    candidate_version: int
    serving_version: int | None
    wins: int = 0
    draws: int = 0
    losses: int = 0
    llr: float = 0.0
    bounds: tuple[float, float] = (0.0, 0.0)
    visits: int = 0
    log: str | None = None
    quarantined: str | None = None
    rollout: dict[str, Any] | None = None

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "games": self.games}


def serving_version(repository: Path, model_name: str, candidate: int) -> int | None:
    """The version a candidate must beat: the one the rollout record says serves, while its
    network is there, else the newest published version other than the candidate (which is
    published before its gate); None when there is none."""
    try:
        current = read_state(repository, model_name)["current"]
    except ValueError:
        current = None
    if current is not None and int(current) != candidate and (
            version_dir(repository, model_name, int(current)) / MODEL_FILE).is_file():
        return int(current)
    others = [v for v in list_versions(repository, model_name) if v != candidate]
    return others[-1] if others else None


def stopping_verdict(entries: list[dict[str, Any]], player: str, *, elo0: float, elo1: float,
                     alpha: float, beta: float, max_games: int) -> SprtResult:
    """The SPRT of `player`'s games at its stopping time: after the first game (in the log's
    order, the order the games finished) at which it is decided or reaches `max_games`; over
    all of them while it is not.

    Why not over all games: games run in parallel, and those in flight when the test stops
    still finish and are logged. Counting them would let a test that crossed a bound cross
    back (a pass after game 79 turned "undecided" by game 80's loss), and a sequential test's
    error rates hold for the verdict at its stopping time only."""
    wins = draws = losses = 0
    for entry in entries:
        w, d, l_ = record([entry], player)
        wins, draws, losses = wins + w, draws + d, losses + l_
        result = sprt(wins, draws, losses, elo0=elo0, elo1=elo1, alpha=alpha, beta=beta,
                      max_games=max_games)
        if result.verdict != Verdict.CONTINUE:
            return result
    return sprt(wins, draws, losses, elo0=elo0, elo1=elo1, alpha=alpha, beta=beta,
                max_games=max_games)


def _reason(result: SprtResult, candidate: int, serving: int, visits: int,
            max_games: int) -> str:
    games = result.wins + result.draws + result.losses
    undecided = (f"undecided after the cap of {max_games} games" if games >= max_games
                 else f"undecided after {games} games (cap {max_games})")
    what = {Verdict.PASSED: "stronger", Verdict.FAILED: "not stronger",
            Verdict.UNDECIDED: undecided}
    verdict = what.get(result.verdict, result.verdict.value)
    return (f"match against v{serving} at {visits} visits: {verdict} ({result.describe()}; "
            f"score {result.score:.3f})")


def gate_by_match(repository: Path, game: Game | str, candidate_version: int, *,
                  model_name: str | None = None, serving: int | None = None,
                  visits: int = DEFAULT_GATE_VISITS,
                  max_games: int = DEFAULT_MAX_GAMES, out_dir: Path | None = None,
                  jobs: int = 1, seed: int = 0, size: int | None = None,
                  elo0: float = DEFAULT_ELO0, elo1: float = DEFAULT_ELO1,
                  alpha: float = DEFAULT_ALPHA, beta: float = DEFAULT_BETA,
                  rollout_client: Any = None, act: bool = True,
                  suite: tuple[tuple[int, ...], ...] = (),
                  on_game: Callable[[dict[str, Any]], None] | None = None
                  ) -> MatchGateDecision:
    """Play the candidate against the serving version until the SPRT decides or `max_games`
    games are played; record, then act on the decision (`act` False: decide only, no card,
    quarantine or rollout). `serving`: the version to beat (default: `serving_version`). See
    the module docstring. `suite`: the openings (a saved balanced suite; default the match
    runner's random suite from `seed`)."""
    repository = Path(repository)
    game = get_game(game) if isinstance(game, str) else game
    model = model_name or game.default_model
    if max_games < 2 or visits < 1:
        raise ValueError(f"need max_games >= 2 and visits >= 1, got {max_games}, {visits}")
    if candidate_version not in list_versions(repository, model):
        earlier = _refused_before(repository, model, candidate_version)
        if earlier is not None:
            return earlier
        raise ValueError(f"{model} v{candidate_version} is not published in {repository}")
    serving = serving if serving is not None else serving_version(repository, model,
                                                                   candidate_version)
    if serving is None or serving == candidate_version:
        decision = MatchGateDecision(True, Verdict.PASSED.value,
                                     "no other version serves: nothing to beat", model,
                                     candidate_version, None, visits=visits)
        return _act(repository, decision, rollout_client) if act else decision
    candidate = resolve(f"version:{model}/{candidate_version}:visits={visits}", game, repository)
    opponent = resolve(f"version:{model}/{serving}:visits={visits}", game, repository)
    folder = Path(out_dir) if out_dir is not None else (
        DEFAULT_GATE_DIR / model / f"v{candidate_version}-vs-v{serving}-{visits}visits")

    def test(entries: list[dict[str, Any]]) -> SprtResult:
        return stopping_verdict(entries, candidate.label, elo0=elo0, elo1=elo1, alpha=alpha,
                                beta=beta, max_games=max_games)

    pairs = math.ceil(max_games / 2)
    if suite and len(suite) < pairs:
        raise ValueError(f"the gate's cap of {max_games} games needs {pairs} openings, the "
                         f"suite holds {len(suite)}")
    config = MatchConfig(pairs=pairs, size=size, seed=seed, jobs=jobs, suite=tuple(suite))
    report = run_match(game, [candidate, opponent], folder, config, on_game=on_game,
                       stop=lambda entries: test(entries).verdict != Verdict.CONTINUE,
                       tag={"gate": {"candidate": candidate_version, "serving": serving}})
    result = test(report.entries)
    verdict = Verdict.UNDECIDED if result.verdict == Verdict.CONTINUE else result.verdict
    result = SprtResult(verdict, result.llr, result.lower, result.upper, result.wins,
                        result.draws, result.losses)
    log.info("gate of %s v%d: %s", model, candidate_version, result.describe())
    decision = MatchGateDecision(
        verdict == Verdict.PASSED, verdict.value,
        _reason(result, candidate_version, serving, visits, max_games), model,
        candidate_version, serving, result.wins, result.draws, result.losses,
        round(result.llr, 4), (round(result.lower, 4), round(result.upper, 4)), visits,
        str(report.log_path))
    return _act(repository, decision, rollout_client) if act else decision


def _refused_before(repository: Path, model: str, version: int) -> MatchGateDecision | None:
    """The decision of an earlier run of this gate that quarantined the version (a rerun
    after a kill, say), from the ``match_gate`` its card carries; None when there is none."""
    folder = Path(repository) / model / QUARANTINE_DIR / str(version)
    try:
        card = json.loads((folder / METADATA_FILE).read_text()).get("match_gate")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(card, dict) or card.get("passed") is not False:
        return None
    fields = {k: card[k] for k in ("verdict", "reason", "serving_version", "wins", "draws",
                                   "losses", "llr", "visits", "log") if k in card}
    return MatchGateDecision(False, model_name=model, candidate_version=version,
                             bounds=tuple(card.get("bounds", (0.0, 0.0))),
                             quarantined=str(folder), **fields)


def _act(repository: Path, decision: MatchGateDecision, rollout_client: Any
         ) -> MatchGateDecision:
    """Record the decision on the candidate's card, then roll it out or quarantine it."""
    model, version = decision.model_name, decision.candidate_version
    card = {k: v for k, v in decision.to_dict().items()
            if k not in ("quarantined", "rollout", "model_name", "candidate_version")}
    update_card(repository, model, version, {"match_gate": {**card, "at": now_text()}})
    if not decision.passed:
        moved = quarantine(repository, model, version, f"gate: {decision.reason}",
                           action="gate")
        return _replace(decision, quarantined=str(moved))
    if rollout_client is None:
        return decision
    from services.triton.rollout import RolloutError, rollout

    try:
        report = rollout(rollout_client, repository, version, model)
    except RolloutError as exc:
        log.warning("%s v%d passed the gate, refused by the rollout: %s", model, version, exc)
        return _replace(decision, rollout={"served": False, "reason": str(exc),
                                           "quarantined": exc.quarantined})
    return _replace(decision, rollout={"served": True, **report.to_dict()})


def _replace(decision: MatchGateDecision, **changes: Any) -> MatchGateDecision:
    return MatchGateDecision(**{**asdict(decision), **changes})


__all__ = ["DEFAULT_GATE_DIR", "DEFAULT_GATE_VISITS", "DEFAULT_MAX_GAMES",
           "MatchGateDecision", "gate_by_match", "serving_version", "stopping_verdict"]
