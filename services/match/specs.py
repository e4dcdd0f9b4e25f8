"""Engines named on a command line: ``KIND[:TARGET][:KEY=VALUE]...``, checked before a game.

Why a text form: a match, its log and its ratings name players; the same text on the command
line, in a Prefect parameter and in the log says what played. Kinds:

    version:[MODEL/]N|serving|latest[:visits=200][:time_ms=0][:value=1][:rollout_lambda=0]
            [:batch=16][:c_puct=1.5][:triton=HOST:PORT]
        a published version of the repository searched at a budget (in-process TorchScript of
        the version folder, or through Triton pinned to that version with ``triton=``);
        ``serving``: the version the rollout record serves, ``latest``: the newest published;
        a quarantined version (a candidate the gate or a rollout refused, moved to
        ``<repo>/<model>/quarantine/N/``) is named by its number too and plays from that
        folder in-process (Triton never loads it: ``triton=`` is refused), so a refused
        candidate can still be rated;
        ``rollout_lambda`` in [0, 1]: leaf values mixed with fast rollouts of the rollout
        policy published with the version (`services.search.rollout_value`); ``batch``: leaves
        a network call (the search's virtual-loss batch): at a fixed visit budget a smaller
        batch searches deeper, at a time budget a larger one evaluates more leaves a second;
        ``c_puct``: PUCT's exploration constant
    policy:[MODEL/]N|serving|latest[:triton=HOST:PORT]
        the version's raw policy (argmax of the legal logits)
    gnugo[:level=10][:path=/usr/games/gnugo]
        GNU Go at a level (GTP, Chinese rules: area scoring, as the Go rules here)
    gtp:cmd=COMMAND LINE
        any GTP program
    gomocup:[timeout_turn=1000:][rule=0:]cmd=COMMAND LINE
        any Gomocup (Piskvork protocol) brain; INFO timeout_turn (ms) and rule (bits) sent

Every kind takes ``name=LABEL``, the player's name in the log and the ratings (default: the
spec, with the version resolved to its number and the defaults spelt out, so that "serving"
today and "3" name the same player). A segment without ``=`` after an option continues that
option's value (``triton=127.0.0.1:8001``); ``cmd=`` takes the rest of the text as it is and
comes last. `resolve` checks what it can before the first game (the version folder and its
``model.pt``, the program on PATH) and says what is wrong in one sentence.
"""

from __future__ import annotations

import math
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.defaults import MODEL_FILE
from services.games.base import Game
from services.games.rollout import RolloutWeights
from services.match.engines import (
    Engine,
    GomocupBrainEngine,
    GtpProgramEngine,
    PolicyEngine,
    SearchEngine,
    gnugo_argv,
)
from services.match.gtp_process import find_gnugo
from services.repository.rollout_policy import ROLLOUT_FILE
from services.repository.rollout_state import reference_version
from services.repository.versions import (
    QUARANTINE_DIR,
    latest_version,
    list_versions,
    quarantined_versions,
    version_dir,
)
from services.search.puct import DEFAULT_BATCH_SIZE, DEFAULT_C_PUCT
from services.search.rollout_value import FixedRollouts, check_lambda

DEFAULT_VISITS = 200
DEFAULT_GNUGO_LEVEL = 10
DEFAULT_TIMEOUT_TURN_MS = 1000
MAX_BATCH = 1024  # leaves a network call: far above any useful batch, a bound on a typo
MAX_C_PUCT = 100.0  # far above any useful exploration constant, a bound on a typo

# kind -> (takes a target, its options)
KINDS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "version": (True, ("visits", "time_ms", "value", "rollout_lambda", "batch", "c_puct",
                       "triton", "name")),
    "policy": (True, ("triton", "name")),
    "gnugo": (False, ("level", "path", "name")),
    "gtp": (False, ("cmd", "name")),
    "gomocup": (False, ("cmd", "timeout_turn", "rule", "name")),
}


class EngineSpecError(ValueError):
    """An engine spec that cannot name a player (the message says why, with the spec)."""


@dataclass(frozen=True)
class EngineSpec:
    """A parsed spec: kind, target (a version: ``[MODEL/]N``), options in the order given."""

    text: str
    kind: str
    target: str = ""
    options: tuple[tuple[str, str], ...] = ()

    def option(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)

    def int_option(self, key: str, default: int, low: int, high: int | None = None) -> int:
        value = self.option(key)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise EngineSpecError(f"{self.text!r}: {key}={value!r} is not a whole number"
                                  ) from None
        if number < low or (high is not None and number > high):
            span = f"{low}..{high}" if high is not None else f">= {low}"
            raise EngineSpecError(f"{self.text!r}: {key} must be {span}, got {number}")
        return number

    def batch_option(self) -> int:
        """``batch``, the leaves a network call (the search's default when not given), checked
        to be in 1..MAX_BATCH."""
        return self.int_option("batch", DEFAULT_BATCH_SIZE, 1, MAX_BATCH)

    def c_puct_option(self) -> float:
        """``c_puct`` (the search's default when not given), a finite number > 0."""
        value = self.option("c_puct")
        if value is None:
            return DEFAULT_C_PUCT
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and 0 < number <= MAX_C_PUCT):
            raise EngineSpecError(f"{self.text!r}: c_puct must be a number in (0, {MAX_C_PUCT:g}],"
                                  f" got {value!r}")
        return number

    def lambda_option(self) -> float:
        """``rollout_lambda`` (0 when not given), checked to be in [0, 1]."""
        value = self.option("rollout_lambda")
        if value is None:
            return 0.0
        try:
            return check_lambda(float(value))
        except ValueError:
            raise EngineSpecError(f"{self.text!r}: rollout_lambda must be a number in [0, 1], "
                                  f"got {value!r}") from None


def parse_engine(text: str) -> EngineSpec:
    """The spec of `text`; EngineSpecError saying what is wrong (see the module docstring)."""
    text = text.strip()
    kind, _, rest = text.partition(":")
    if kind not in KINDS:
        raise EngineSpecError(f"{text!r}: unknown engine kind {kind!r} (kinds: "
                              f"{', '.join(KINDS)})")
    takes_target, allowed = KINDS[kind]
    target = ""
    options: list[list[str]] = []
    segments = rest.split(":") if rest else []
    i = 0
    while i < len(segments):
        segment = segments[i]
        key, eq, value = segment.partition("=")
        if key == "cmd" and eq:
            value = ":".join([value, *segments[i + 1:]])
            options.append([key, value])
            break
        if eq and key.isidentifier():
            options.append([key, value])
        elif options:
            options[-1][1] += ":" + segment  # host:port and the like
        elif takes_target and not target:
            target = segment
        else:
            raise EngineSpecError(f"{text!r}: {segment!r} is not KEY=VALUE")
        i += 1
    for key, _ in options:
        if key not in allowed:
            raise EngineSpecError(f"{text!r}: {kind} takes no option {key!r} (options: "
                                  f"{', '.join(allowed)})")
    keys = [k for k, _ in options]
    if len(set(keys)) != len(keys):
        raise EngineSpecError(f"{text!r}: an option is given twice")
    if takes_target and not target:
        raise EngineSpecError(f"{text!r}: name the version, e.g. {kind}:gomoku_policy/3, "
                              f"{kind}:3 or {kind}:serving")
    if "cmd" in allowed and not dict(options).get("cmd", "").strip():
        raise EngineSpecError(f"{text!r}: give the program's command line as cmd=... (last)")
    spec = EngineSpec(text, kind, target, tuple((k, v) for k, v in options))
    _check_numbers(spec)
    return spec


def _check_numbers(spec: EngineSpec) -> None:
    if spec.kind == "version":
        visits = spec.int_option("visits", 0, 0)
        time_ms = spec.int_option("time_ms", 0, 0)
        spec.int_option("value", 1, 0, 1)
        spec.lambda_option()
        spec.batch_option()
        spec.c_puct_option()
        if spec.option("visits") is not None and visits == 0 and time_ms == 0:
            raise EngineSpecError(f"{spec.text!r}: visits=0 needs time_ms > 0")
    elif spec.kind == "gnugo":
        spec.int_option("level", DEFAULT_GNUGO_LEVEL, 0, 10)
    elif spec.kind == "gomocup":
        spec.int_option("timeout_turn", DEFAULT_TIMEOUT_TURN_MS, 0)
        spec.int_option("rule", 0, 0)


@dataclass(frozen=True)
class Player:
    """A resolved spec: what plays, named `label`. `version` and `model_name` for a network
    version (its folder: `folder`, None when it is evaluated through Triton)."""

    label: str
    spec: EngineSpec
    model_name: str | None = None
    version: int | None = None
    folder: str | None = None
    argv: tuple[str, ...] = ()
    rollout_file: str | None = None  # the version's rollout policy, for rollout_lambda > 0

    def describe(self) -> dict[str, Any]:
        """What the log records about the player."""
        out: dict[str, Any] = {"spec": self.spec.text, "kind": self.spec.kind}
        if self.version is not None:
            out.update(model_name=self.model_name, version=self.version,
                       visits=self.spec.int_option("visits", 0, 0),
                       time_ms=self.spec.int_option("time_ms", 0, 0),
                       batch=self.spec.batch_option(),
                       c_puct=self.spec.c_puct_option())
            if self.folder is not None and Path(self.folder).parent.name == QUARANTINE_DIR:
                out["quarantined"] = True
        if self.argv:
            out["argv"] = list(self.argv)
        return out


def _version(spec: EngineSpec, game: Game, repository: Path) -> tuple[str, int, Path]:
    """(model, version number, its folder): a published version's numbered folder, or a
    quarantined one's folder under ``quarantine/`` (`quarantine_folder`)."""
    model, _, number = spec.target.rpartition("/")
    model = model or game.default_model
    if number == "serving":
        found = reference_version(repository, model)
    elif number == "latest":
        found = latest_version(repository, model)
    elif number.isdigit() and int(number) > 0:
        found = int(number)
    else:
        raise EngineSpecError(f"{spec.text!r}: {number!r} is not a version number, serving "
                              "or latest")
    published = list_versions(repository, model)
    if found is not None and found in published:
        return model, int(found), version_dir(repository, model, int(found))
    if found is not None and found in quarantined_versions(repository, model):
        if spec.option("triton") is not None:
            raise EngineSpecError(f"{spec.text!r}: {model} v{found} is quarantined, and "
                                  "Triton never loads a quarantined version: leave out "
                                  "triton= to play it in-process")
        return model, int(found), quarantine_folder(repository, model, int(found))
    raise EngineSpecError(
        f"{spec.text!r}: {model} has no published version {found or number} in "
        f"{repository} (published: {', '.join(map(str, published)) or 'none'})")


def quarantine_folder(repository: Path, model: str, version: int) -> Path:
    """The folder a quarantined version lies in: ``quarantine/N/``, or, for a number
    quarantined more than once (``N-2``, ...: a hand-made folder that reused it), the newest
    of them."""
    base = Path(repository) / model / QUARANTINE_DIR
    first = base / str(version)
    again = sorted((p for p in base.glob(f"{version}-*") if p.is_dir()
                    and p.name.removeprefix(f"{version}-").isdigit()),
                   key=lambda p: int(p.name.removeprefix(f"{version}-")))
    return again[-1] if again else first


def _program(spec: EngineSpec, argv: list[str]) -> tuple[str, ...]:
    if not argv:
        raise EngineSpecError(f"{spec.text!r}: empty command line")
    if shutil.which(argv[0]) is None and not Path(argv[0]).is_file():
        raise EngineSpecError(f"{spec.text!r}: program {argv[0]!r} not found")
    return tuple(argv)


def resolve(spec: EngineSpec | str, game: Game, repository: Path) -> Player:
    """The player `spec` names, checked (EngineSpecError otherwise)."""
    spec = parse_engine(spec) if isinstance(spec, str) else spec
    repository = Path(repository)
    name = spec.option("name")
    if spec.kind in ("version", "policy"):
        model, version, folder = _version(spec, game, repository)
        if spec.option("triton") is None and not (folder / MODEL_FILE).is_file():
            raise EngineSpecError(f"{spec.text!r}: {folder / MODEL_FILE} is missing")
        rollout_file: Path | None = None
        if spec.kind == "version":
            visits = spec.int_option("visits", 0, 0)
            time_ms = spec.int_option("time_ms", 0, 0)
            visits = visits or (0 if time_ms else DEFAULT_VISITS)
            options = [("visits", str(visits))] + ([("time_ms", str(time_ms))] if time_ms
                                                   else [])
            batch = spec.batch_option()
            if batch != DEFAULT_BATCH_SIZE:
                options.append(("batch", str(batch)))
            if spec.c_puct_option() != DEFAULT_C_PUCT:
                options.append(("c_puct", f"{spec.c_puct_option():g}"))
            if spec.int_option("value", 1, 0, 1) == 0:
                options.append(("value", "0"))
            lam = spec.lambda_option()
            if lam > 0:
                options.append(("rollout_lambda", f"{lam:g}"))
                rollout_file = folder / ROLLOUT_FILE
                if not rollout_file.is_file():
                    raise EngineSpecError(
                        f"{spec.text!r}: {model} version {version} has no rollout policy "
                        f"({folder / ROLLOUT_FILE} is missing: publish the network with "
                        "--rollout, or search with rollout_lambda=0)")
            label = f"version:{model}/{version}:" + ":".join(f"{k}={v}" for k, v in options)
            kept = tuple((k, v) for k, v in spec.options if k in ("triton", "name"))
            spec = EngineSpec(spec.text, spec.kind, f"{model}/{version}",
                              (*options, *kept))
        else:
            label = f"policy:{model}/{version}"
        return Player(name or label, spec, model, version,
                      None if spec.option("triton") else str(folder),
                      rollout_file=str(rollout_file) if rollout_file else None)
    if spec.kind == "gnugo":
        level = spec.int_option("level", DEFAULT_GNUGO_LEVEL, 0, 10)
        binary = find_gnugo(spec.option("path"))
        if binary is None:
            raise EngineSpecError(f"{spec.text!r}: gnugo not found (apt-get install gnugo, "
                                  "or path=...)")
        return Player(name or f"gnugo:level={level}", spec, argv=tuple(gnugo_argv(binary,
                                                                                   level)))
    argv = _program(spec, shlex.split(spec.option("cmd") or ""))
    return Player(name or spec.text, spec, argv=argv)


def open_engine(player: Player, game: Game, *, seed: int = 0) -> Engine:
    """A started engine for `player` (torch at 1 thread for an in-process network). `seed`:
    GNU Go's random seed."""
    spec = player.spec
    if spec.kind in ("version", "policy"):
        url = spec.option("triton")
        assert player.model_name is not None and player.version is not None
        if url:
            from services.triton.pinned import PinnedTriton

            evaluator: Any = PinnedTriton(url, player.model_name, player.version, game)
        else:
            from services.models.local_evaluator import LocalEvaluator

            assert player.folder is not None
            evaluator = LocalEvaluator.from_version_folder(
                player.folder, threads=1, use_value=spec.int_option("value", 1, 0, 1) == 1)
        if spec.kind == "policy":
            return PolicyEngine(evaluator, player.label)
        lam = spec.lambda_option()
        rollouts = None
        if lam > 0:
            assert player.rollout_file is not None
            rollouts = FixedRollouts(RolloutWeights.from_bytes(
                Path(player.rollout_file).read_bytes()))
        return SearchEngine(evaluator, player.label, visits=spec.int_option("visits", 0, 0),
                            time_ms=spec.int_option("time_ms", 0, 0), rollout_lambda=lam,
                            batch_size=spec.batch_option(),
                            c_puct=spec.c_puct_option(),
                            rollouts=rollouts, seed=seed)
    if spec.kind == "gnugo":
        argv = list(player.argv)
        argv[-1] = str(seed)
        return GtpProgramEngine(argv, player.label)
    if spec.kind == "gtp":
        return GtpProgramEngine(player.argv, player.label)
    info = {"timeout_turn": spec.int_option("timeout_turn", DEFAULT_TIMEOUT_TURN_MS, 0),
            "rule": spec.int_option("rule", 0, 0), "game_type": 1}
    return GomocupBrainEngine(player.argv, player.label, info=info,
                              answer_timeout_s=max(60.0, info["timeout_turn"] / 250.0))


__all__ = ["DEFAULT_GNUGO_LEVEL", "DEFAULT_TIMEOUT_TURN_MS", "DEFAULT_VISITS", "KINDS",
           "EngineSpec", "EngineSpecError", "Player", "open_engine", "parse_engine", "resolve"]
