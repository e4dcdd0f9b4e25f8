"""Roll a published model version into Triton, smoke-tested first, and roll it back.

`rollout(client, repository, version)` moves serving from the version Triton serves now (the
highest READY version of the model) to `version`, in five steps:

1. **Files.** ``<repo>/<model>/<version>/`` must hold ``model.py`` and ``model.pt``; ``model.pt``
   must be an intact zip archive (every member's CRC is checked, which catches truncated or
   bit-flipped TorchScript files) and, when ``metadata.json`` records a ``sha256``, match it.
2. **Candidate.** The version is loaded under a separate model name
   (``<model>__candidate``) from the bytes just checked (repository API with a config and files
   override), so production traffic never reaches it: a request without an explicit version is
   answered by the *highest* READY version of a model, so loading the candidate next to the
   serving version under the same name would hand it the traffic before it is tested. A file
   Triton cannot load is refused here, with Triton's reason.
3. **Smoke test** on the candidate (`smoke_test`): the known positions of the model's game
   (`Game.smoke_positions`: Gomoku int8 [15, 15] boards, Go compact int8 [4, 19, 19] inputs)
   answer with logits of the game's policy size ([N, 225], Go [N, 362]), float32, all finite,
   a well-formed masked policy over the legal moves (the pass included), the same answer alone
   and in a batch and on a repeat, and the answers carry the candidate's model version. Then
   what the model knows, all blocking (a model whose logits are the board cells, uniform over
   the empty points, with a NaN value, passed every check above):

   - **tactics** (games with `Game.tactical_positions`; Gomoku: take a five, block a four) a right
     answer is among the raw policy's `TACTICAL_TOP_K` best legal points;
   - **value**: every value finite when the version has a value head (``value_head`` in its
     metadata; when the metadata does not say, found by running ``model.pt`` here);
   - on the positions stored with the version (``smoke_positions.npz``, written by the train
     flow: real validation boards as the network takes them and the moves played): **top-1** not
     below the gate's floor (`gate.top1_floor`: the top-1 the metadata records for these rows
     minus the gate's tolerance; with only the validation top-1 recorded, also minus two
     standard errors), and **agreement** with the serving version (`gate.paired_floor`: not
     below its top-1 on the same rows minus the tolerance and two standard errors of the
     difference; informational for a rollback, which goes back on purpose). A version without
     stored positions (published before they were stored, or by hand) gets these two as
     informational, marked "not checked", with the reason.
4. **Switch.** The model is loaded under its own name with the on-disk ``config.pbtxt`` changed
   only in ``version_policy: {specific: {versions: [version]}}``: Triton brings the version up
   while the old one keeps answering, then unloads the old one (in-flight requests finish).
   Then one unversioned request must be answered by the new version with exactly the
   candidate's logits, else serving is switched back.
5. **Record.** ``<repo>/<model>/rollout.json`` (written atomically) keeps the current and
   previous versions and a history of rollouts, rollbacks and refusals (`describe_event` words
   them). The record is the truth about what serves: the launcher (`services.triton.server`)
   starts Triton pinned to its ``current``, so a restart serves what the last rollout chose.

Any refusal raises `RolloutError` (with the reason and the smoke checks); the version that was
serving keeps serving. A refusal that belongs to the version (its files, Triton cannot load it,
the smoke test) also moves its folder to ``<repo>/<model>/quarantine/<version>/`` with a
``reason.json`` (`quarantine`): Triton ignores non-numeric folders, so neither a restart nor a
plain load brings it back, and the publisher never reuses its number. Failures that say nothing
about the version (Triton unreachable, a deadline, a failure during the switch) quarantine
nothing. `rollback` rolls out the recorded previous version the same way; the rolled-back
version stays published, but it is no longer ``current``, so nothing serves it again unless a
rollout or rollback chooses it. Rollouts of one model are serialised with an ``flock`` on
``<repo>/<model>/.rollout.lock``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import json
import logging
import os
import time
import uuid
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from services.games.base import Game
from services.games.registry import get_game, registered_games
from services.trainer import gate
from services.triton.client import PolicyClient, TritonError, TritonUnavailableError
from services.triton.publisher import (
    DEFAULT_MODEL_NAME,
    QUARANTINE_DIR,
    SMOKE_POSITIONS_FILE,
    dims_accept,
    list_versions,
    locked_model_dir,
    parse_config,
    quarantined_versions,
    read_smoke_positions,
)

logger = logging.getLogger(__name__)

CANDIDATE_SUFFIX = "__candidate"
STATE_FILE = "rollout.json"
LOCK_FILE = ".rollout.lock"
HISTORY_LIMIT = 100
REQUIRED_FILES = ("model.pt", "model.py")
_CONSISTENCY_ATOL = 1e-4
QUARANTINE_REASON = "reason.json"
# A tactical answer must be among the raw policy's 5 best legal points: Predict lists 5 moves
# by default (top_k 0 means 5), so a client reading Predict sees the win or the block; a trained
# network puts it first (the demo's network ranks every one 1st), an untrained or broken one
# scatters it over ~200 empty points.
TACTICAL_TOP_K = 5
_INFER_ROWS = 64  # stored positions are sent in requests of this many boards


class RolloutError(RuntimeError):
    """A rollout or rollback was refused or failed; the serving version was kept."""

    def __init__(
        self,
        message: str,
        *,
        model_name: str,
        version: int | None,
        serving: int | None,
        smoke: list[SmokeCheck] | None = None,
        action: str = "rollout",
        quarantined: str | None = None,
        cause: str | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = message
        self.cause = cause or message  # the reason alone, without "rollout of ... refused: "
        self.model_name = model_name
        self.version = version
        self.serving = serving
        self.smoke = list(smoke or [])
        self.action = action
        self.quarantined = quarantined  # where the refused version's folder went, if moved

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (Prefect may keep task exceptions)
        return (_rebuild_error, (self.reason, self.__dict__))

    def to_markdown(self) -> str:
        serving = "nothing" if self.serving is None else f"v{self.serving}"
        target = "?" if self.version is None else f"v{self.version}"
        text = (
            f"# {self.action.capitalize()} of {self.model_name} {target} refused\n\n"
            f"Reason: {self.reason}\n\nStill serving: **{serving}**\n"
        )
        if self.quarantined:
            text += (f"\n{target} was moved to `{self.quarantined}` (with {QUARANTINE_REASON}): "
                     "it never serves again, also after a restart.\n")
        if self.smoke:
            text += "\n" + checks_markdown(self.smoke)
        return text


def _rebuild_error(message: str, attrs: dict[str, Any]) -> RolloutError:
    error = RolloutError(message, model_name=attrs["model_name"], version=attrs["version"],
                         serving=attrs["serving"])
    error.__dict__.update(attrs)
    return error


@dataclass(frozen=True)
class SmokeCheck:
    name: str
    passed: bool
    detail: str
    blocking: bool = True  # informational checks never refuse a version
    skipped: bool = False  # not run (what it needs is missing); `detail` says why


@dataclass
class RolloutReport:
    model_name: str
    action: str  # "rollout" | "rollback"
    previous: int | None  # the version that served before (None: nothing served)
    current: int  # the version serving now
    smoke: list[SmokeCheck]
    seconds: float
    changed: bool = True  # False: `current` was already serving, only smoke-tested
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step
    unloaded: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def smoke_passed(self) -> bool:
        return all(c.passed for c in self.smoke if c.blocking)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "smoke_passed": self.smoke_passed}

    def to_markdown(self) -> str:
        before = "nothing" if self.previous is None else f"v{self.previous}"
        title = f"# {self.action.capitalize()}: {self.model_name}"
        if self.changed:
            head = f"{title} {before} -> v{self.current}"
        else:
            head = f"{title} v{self.current} already serving"
        phases = ", ".join(f"{k} {v:.2f} s" for k, v in self.phases.items())
        lines = [head, "", f"{self.seconds:.2f} s in all ({phases})."]
        if self.unloaded:
            lines.append(f"Unloaded: {', '.join(f'v{v}' for v in self.unloaded)}.")
        lines += [*(f"Note: {n}" for n in self.notes), "", checks_markdown(self.smoke)]
        return "\n".join(lines)


def checks_markdown(checks: list[SmokeCheck]) -> str:
    rows = []
    for c in checks:
        result = "not checked" if c.skipped else (
            ("pass" if c.passed else "FAIL") + ("" if c.blocking else " (info)"))
        detail = c.detail.replace("|", "\\|")
        rows.append(f"| {c.name} | {result} | {detail} |")
    return "\n".join(["| smoke check | result | detail |", "|---|---|---|", *rows])


# --------------------------------------------------------------------------- config


def read_model_config(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> Any:
    """The on-disk ``config.pbtxt`` as a ``ModelConfig`` protobuf."""
    return parse_config(Path(repository) / model_name / "config.pbtxt")


def config_json(config: Any, versions: list[int], name: str | None = None) -> str:
    """`config` as JSON for a load override: only ``version_policy`` (and `name`) changed."""
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2

    override = model_config_pb2.ModelConfig()
    override.CopyFrom(config)
    if name is not None:
        override.name = name
    override.version_policy.Clear()
    override.version_policy.specific.versions.extend(int(v) for v in versions)
    return json_format.MessageToJson(override, preserving_proto_field_name=True)


# --------------------------------------------------------------------------- files


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_version_files(
    repository: Path, model_name: str, version: int
) -> tuple[dict[str, bytes], list[str]]:
    """Read and check a version folder; return ({file name: bytes}, notes).

    Raises ValueError naming the folder or file when the version cannot be served.
    """
    folder = Path(repository) / model_name / str(version)
    if version <= 0 or not folder.is_dir():
        published = list_versions(repository, model_name)
        if version in quarantined_versions(repository, model_name):
            where = Path(repository) / model_name / QUARANTINE_DIR / str(version)
            raise ValueError(f"version {version} is quarantined: {quarantine_reason(where)} "
                             f"(see {where / QUARANTINE_REASON}; published: "
                             f"{published or 'none'})")
        raise ValueError(f"version {version} is not published: {folder} does not exist "
                         f"(published: {published or 'none'})")
    missing = [n for n in REQUIRED_FILES if not (folder / n).is_file()]
    if missing:
        raise ValueError(f"version {version}: {', '.join(str(folder / n) for n in missing)} "
                         "missing")
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
    model_pt = folder / "model.pt"
    data = files["model.pt"]
    if not data:
        raise ValueError(f"version {version}: {model_pt} is empty")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as exc:
        # zlib.error: a flipped byte inside a deflated member
        raise ValueError(f"version {version}: {model_pt} is not a TorchScript archive "
                         f"(truncated or corrupt: {exc})") from exc
    if bad is not None:
        raise ValueError(f"version {version}: {model_pt} is corrupt (member {bad!r} fails its "
                         "CRC check)")
    notes: list[str] = []
    meta_path = folder / "metadata.json"
    if "metadata.json" in files:
        try:
            meta = json.loads(files["metadata.json"])
        except ValueError as exc:
            raise ValueError(f"version {version}: {meta_path} is not JSON: {exc}") from exc
        expected = meta.get("sha256") if isinstance(meta, dict) else None
        if expected and expected != _sha256(data):
            raise ValueError(
                f"version {version}: {model_pt} does not match the sha256 recorded in "
                f"{meta_path} ({_sha256(data)[:12]}... != {str(expected)[:12]}...): the file "
                "changed or is corrupt since it was published"
            )
        if not expected:
            notes.append(f"{meta_path} records no sha256")
    else:
        notes.append(f"v{version} has no metadata.json (not made by the publisher)")
    return files, notes


# --------------------------------------------------------------------------- smoke test


def smoke_positions(game: Game) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What `smoke_test` asks a version of `game`'s model about: {name: (network input, legal
    mask over the policy)} (`Game.smoke_positions`)."""
    return game.smoke_positions()


def game_of_input(board_shape: tuple[int, ...]) -> Game | None:
    """The registered game whose default network input is `board_shape` (None: no game's)."""
    for game in registered_games():
        if game.input_shape() == tuple(int(d) for d in board_shape):
            return game
    return None


def _smoke_boards(client: PolicyClient, model_name: str) -> np.ndarray:
    """The boards `smoke_test` sends to `model_name` (its game's `smoke_positions`)."""
    known = smoke_positions(get_game(client.io_of(model_name).game))
    return np.stack([b for b, _ in known.values()])


def masked_policy(logits: np.ndarray, boards: np.ndarray) -> np.ndarray:
    """Softmax over empty points (as the search service computes it); 0 on stones."""
    legal = boards.reshape(len(boards), -1) == 0
    z = np.where(legal, logits.astype(np.float64), -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    e = np.where(legal, np.exp(z), 0.0)
    return e / e.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class StoredPositions:
    """The real positions stored with a version (``smoke_positions.npz``) and what its
    metadata says about them."""

    boards: np.ndarray  # as the network takes them (Gomoku int8 [N, 15, 15], Go [N, 4, S, S])
    moves: np.ndarray  # int64 [N]: the move played
    top1: float | None = None  # the version's own top-1 on these rows, measured at publish time
    validation_top1: float | None = None  # its top-1 on the whole validation split


def _metadata(files: dict[str, bytes]) -> dict[str, Any]:
    try:
        meta = json.loads(files["metadata.json"]) if "metadata.json" in files else {}
    except ValueError:
        return {}  # check_version_files refused it already
    return meta if isinstance(meta, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None


def stored_positions(files: dict[str, bytes], config: Any, version: int
                     ) -> StoredPositions | None:
    """The version's stored positions (None when it has none); ValueError when the file is
    there but unusable (unreadable, boards the config does not take, moves out of range)."""
    if SMOKE_POSITIONS_FILE not in files:
        return None
    try:
        boards, moves = read_smoke_positions(files[SMOKE_POSITIONS_FILE])
    except ValueError as exc:
        raise ValueError(f"version {version}: {exc}") from exc
    dims = tuple(int(d) for d in config.input[0].dims)
    if not dims_accept(dims, boards.shape[1:]):
        raise ValueError(f"version {version}: {SMOKE_POSITIONS_FILE} holds boards "
                         f"{list(boards.shape[1:])}, the model takes {list(dims)}")
    points = int(np.prod(boards.shape[-2:])) + (1 if boards.ndim == 4 else 0)
    if int(moves.max()) >= points:
        raise ValueError(f"version {version}: {SMOKE_POSITIONS_FILE} holds move "
                         f"{int(moves.max())}, boards have {points} moves")
    meta = _metadata(files)
    recorded = meta.get("smoke_positions")
    top1 = _number(recorded.get("top1")) if isinstance(recorded, dict) else None
    metrics = meta.get("metrics")
    validation = metrics.get("validation") if isinstance(metrics, dict) else None
    validation_top1 = _number(validation.get("top1")) if isinstance(validation, dict) else None
    return StoredPositions(boards, moves, top1, validation_top1)


def value_head_of(files: dict[str, bytes], boards: np.ndarray) -> bool | None:
    """Whether the version's network has a value head: its metadata's ``value_head``, else
    found by running ``model.pt`` here on `boards` (None when that fails too)."""
    recorded = _metadata(files).get("value_head")
    if isinstance(recorded, bool):
        return recorded
    try:
        import torch

        model = torch.jit.load(io.BytesIO(files["model.pt"]), map_location="cpu").eval()
        with torch.inference_mode():
            out = model(torch.from_numpy(np.ascontiguousarray(boards[:1])))
    except Exception as exc:  # any failure: unknown, and Triton's answers decide
        logger.info("cannot tell whether the model has a value head: %s", exc)
        return None
    return isinstance(out, (tuple, list))


def top1_hits(logits: np.ndarray, boards: np.ndarray, moves: np.ndarray) -> np.ndarray:
    """Per row, whether the best unoccupied point (a Go pass always counts) is the move
    played: the trainer's top-1 (`services.trainer.metrics.evaluate`), in numpy."""
    stones = boards[:, 0] if boards.ndim == 4 else boards
    occupied = stones.reshape(len(boards), -1) != 0
    extra = logits.shape[1] - occupied.shape[1]
    if extra:
        occupied = np.pad(occupied, ((0, 0), (0, extra)))
    masked = np.where(occupied, -np.inf, logits.astype(np.float64))
    return np.argmax(masked, axis=1) == moves


def masked_policy_legal(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Softmax over the legal entries of each row (`legal`: bool, same shape); 0 elsewhere."""
    z = np.where(legal, logits.astype(np.float64), -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    e = np.where(legal, np.exp(z), 0.0)
    return e / e.sum(axis=1, keepdims=True)


def smoke_test(
    client: PolicyClient,
    model_name: str,
    version: int,
    centre_radius: int | None = None,
    *,
    stored: StoredPositions | None = None,
    value_head: bool | None = None,
    serving_model: str | None = None,
    serving_version: int | None = None,
    tolerance: float = gate.DEFAULT_TOLERANCE,
    compare_blocking: bool = True,
) -> tuple[list[SmokeCheck], np.ndarray]:
    """Ask `version` of `model_name` (explicitly) about its game's `smoke_positions` and
    `tactical_positions` (`services.games.base.Game`) and the `stored` positions.

    Returns the checks and the known positions' logits. A check that cannot even get an
    answer fails with the error. `centre_radius` makes "the empty board's top move lies within
    that many points of the centre" a blocking check (it is informational otherwise; Gomoku
    only). `value_head` True makes finite values blocking. `serving_version` of
    `serving_model` (the version serving now; None: nothing) is asked about the stored
    positions for the agreement check, blocking when `compare_blocking`; `tolerance` is the
    gate's (`services.trainer.gate`).
    """
    io = client.io_of(model_name)
    game = get_game(io.game)
    known = smoke_positions(game)
    names = list(known)
    boards = np.stack([b for b, _ in known.values()])
    legal = np.stack([m for _, m in known.values()])
    n_moves = io.n_moves
    checks: list[SmokeCheck] = []
    want = str(version)
    try:
        first = client.infer(boards, model_version=version, model_name=model_name)
        again = client.infer(boards, model_version=version, model_name=model_name)
        alone = [
            client.infer(boards[i : i + 1], model_version=version, model_name=model_name)
            for i in range(len(boards))
        ]
    except TritonError as exc:
        detail = _no_answer(version, exc)
        if not isinstance(exc, TritonUnavailableError):  # name the boards it fails on
            failing = []
            for i, name in enumerate(names):
                try:
                    client.infer(boards[i:i + 1], model_version=version, model_name=model_name)
                except TritonError:
                    failing.append(name)
            if failing:
                detail = f"v{version} fails on: {', '.join(failing)}; {detail}"
        checks.append(SmokeCheck("answers", False, detail))
        return checks, np.zeros((0, n_moves), np.float32)

    answered = {(r.model_name, r.model_version) for r in [first, again, *alone]}
    checks.append(SmokeCheck(
        "model version", answered == {(model_name, want)},
        f"answers came from {sorted(answered)}, expected ({model_name!r}, {want!r})"))
    logits = first.logits
    ok_shape = logits.shape == (len(boards), n_moves) and logits.dtype == np.float32
    checks.append(SmokeCheck("shape", ok_shape, f"{logits.dtype} {logits.shape}"))
    bad = ~np.isfinite(logits)
    if bad.any():
        which = [names[i] for i in np.flatnonzero(bad.any(axis=1))]
        detail = f"{int(bad.sum())} non-finite logits (NaN/Inf) in: {', '.join(which)}"
    else:
        detail = f"all {logits.size} logits finite, range [{logits.min():.3g}, {logits.max():.3g}]"
    checks.append(SmokeCheck("finite", not bad.any(), detail))

    policy = masked_policy_legal(logits, legal)
    sums = policy.sum(axis=1)
    ok_policy = bool(np.isfinite(policy).all() and np.allclose(sums, 1.0, atol=1e-6)
                     and not policy[~legal].any())
    single = legal.sum(axis=1) == 1  # a position with one legal move: all of the policy on it
    ok_policy = ok_policy and bool((policy[single][legal[single]] > 0.999).all())
    checks.append(SmokeCheck(
        "masked policy", ok_policy,
        "softmax over the legal moves sums to 1, 0 elsewhere" if ok_policy
        else "masked softmax is not a distribution over the legal moves (sums "
             f"{np.round(sums, 4)})"))

    scale = max(1.0, float(np.nanmax(np.abs(logits))) if np.isfinite(logits).any() else 1.0)
    diff_batch = max(float(np.max(np.abs(r.logits[0] - logits[i]))) for i, r in enumerate(alone))
    diff_repeat = float(np.max(np.abs(again.logits - logits)))
    for name, diff, what in (("batch consistency", diff_batch, "alone vs in a batch of "
                              f"{len(boards)}"), ("deterministic", diff_repeat, "repeated batch")):
        ok = bool(np.isfinite(diff) and diff <= _CONSISTENCY_ATOL * scale)
        checks.append(SmokeCheck(name, ok, f"max |difference| {diff:.3g} ({what})"))

    if "empty" in names and bool(np.isfinite(logits).all()):
        checks.append(_empty_board_check(game, int(np.argmax(policy[names.index("empty")])),
                                         centre_radius))

    values = [first.values]
    try:
        if game.tactical_positions():
            tactics, tactical_values = _tactics_check(client, game, model_name, version)
            checks.append(tactics)
            values.append(tactical_values)
        checks += _stored_checks(client, model_name, version, stored, serving_model,
                                 serving_version, tolerance, compare_blocking, values)
    except TritonError as exc:
        checks.append(SmokeCheck("answers", False, _no_answer(version, exc)))
    checks.append(_value_check(version, value_head, values))
    return checks, logits


TRANSIENT_PREFIX = "Triton could not answer"  # an "answers" failure that is not the version's


def _no_answer(version: int, exc: TritonError) -> str:
    if isinstance(exc, TritonUnavailableError):  # down, not ready, deadline: not the version
        return f"{TRANSIENT_PREFIX} for v{version}: {exc}"
    return f"v{version} did not answer: {exc}"


def _infer_rows(client: PolicyClient, boards: np.ndarray, version: int, model_name: str
                ) -> tuple[np.ndarray, np.ndarray | None]:
    """(logits, values or None) of `boards`, sent `_INFER_ROWS` at a time."""
    logits, values = [], []
    for i in range(0, len(boards), _INFER_ROWS):
        r = client.infer(boards[i:i + _INFER_ROWS], model_version=version,
                         model_name=model_name)
        logits.append(r.logits)
        values.append(r.values)
    both = None if any(v is None for v in values) else np.concatenate(values)
    return np.concatenate(logits), both


def _empty_board_check(game: Game, top: int, centre_radius: int | None) -> SmokeCheck:
    """The empty board's top move and its distance from the centre: blocking within
    `centre_radius` when given, informational otherwise."""
    size = game.default_size
    name = game.move_name(top, size)
    if top == game.pass_move(size):
        return SmokeCheck("empty board", centre_radius is None, f"top move {name}",
                          blocking=centre_radius is not None)
    x, y = top % size, top // size
    dist = max(abs(x - size // 2), abs(y - size // 2))
    blocking = centre_radius is not None
    ok = dist <= centre_radius if centre_radius is not None else True
    return SmokeCheck("empty board", ok, f"top move {name}, {dist} from the centre"
                      + (f" (limit {centre_radius})" if blocking else ""), blocking=blocking)


def _tactics_check(client: PolicyClient, game: Game, model_name: str, version: int
                   ) -> tuple[SmokeCheck, np.ndarray | None]:
    """Every answer of the game's `tactical_positions` among the raw policy's
    `TACTICAL_TOP_K` best legal points (blocking); also returns the values Triton sent."""
    tactics = game.tactical_positions()
    size = game.default_size

    def _name(move: int) -> str:
        return game.move_name(move, size)

    boards = np.stack([b for b, _ in tactics.values()])
    result = client.infer(boards, model_version=version, model_name=model_name)
    k = TACTICAL_TOP_K
    if not np.isfinite(result.logits).all():
        return SmokeCheck("tactics", False, "non-finite logits on the tactical positions"), \
            result.values
    ranks, misses = [], []
    for (name, (board, answers)), row in zip(tactics.items(), result.logits, strict=True):
        legal = board.reshape(-1) == 0
        order = np.argsort(-np.where(legal, row.astype(np.float64), -np.inf), kind="stable")
        position = {int(p): r for r, p in enumerate(order, start=1)}
        rank = min(position[a] for a in answers)
        ranks.append(rank)
        if rank > k:
            misses.append(f"{name}: {'/'.join(_name(a) for a in answers)} ranked {rank} "
                          f"(top move {_name(int(order[0]))})")
    if misses:
        detail = f"right answer not in the top {k}: " + "; ".join(misses)
    else:
        detail = (f"all {len(tactics)} (take a five, block a four) answered within the top {k} "
                  f"(ranks {', '.join(str(r) for r in ranks)})")
    return SmokeCheck("tactics", not misses, detail), result.values


def _stored_checks(
    client: PolicyClient,
    model_name: str,
    version: int,
    stored: StoredPositions | None,
    serving_model: str | None,
    serving_version: int | None,
    tolerance: float,
    compare_blocking: bool,
    values: list[np.ndarray | None],
) -> list[SmokeCheck]:
    """The top-1 and agreement checks on the stored positions (`values` gets the candidate's
    values there)."""
    if stored is None:
        why = (f"no {SMOKE_POSITIONS_FILE} in the version folder (published before positions "
               "were stored, or by hand): not checked")
        return [SmokeCheck("top-1 (stored positions)", False, why, blocking=False,
                           skipped=True),
                SmokeCheck("agreement with serving", False, why, blocking=False,
                           skipped=True)]
    n = len(stored.moves)
    logits, stored_values = _infer_rows(client, stored.boards, version, model_name)
    values.append(stored_values)
    hits = top1_hits(logits, stored.boards, stored.moves)
    top1 = float(hits.mean())
    checks = []
    if stored.top1 is not None:
        floor = gate.top1_floor(stored.top1, tolerance)
        basis = f"{stored.top1:.3f} recorded for these rows at publish time - {tolerance}"
    elif stored.validation_top1 is not None:
        floor = gate.top1_floor(stored.validation_top1, tolerance, sample_rows=n)
        basis = (f"validation top-1 {stored.validation_top1:.3f} - {tolerance} - 2 standard "
                 f"errors on {n} rows")
    else:
        floor = None
        basis = ""
    if floor is None:
        checks.append(SmokeCheck("top-1 (stored positions)", False,
                                 f"top-1 {top1:.3f} on {n} rows; the metadata records no top-1 "
                                 "to compare with: not checked", blocking=False, skipped=True))
    else:
        checks.append(SmokeCheck("top-1 (stored positions)", top1 >= floor,
                                 f"top-1 {top1:.3f} on {n} rows, floor {floor:.3f} ({basis})"))

    name = "agreement with serving"
    if serving_version is None or serving_model is None or serving_version == version:
        why = ("nothing serves to compare with" if serving_version is None
               else f"v{version} is the serving version")
        checks.append(SmokeCheck(name, False, f"{why}: not checked", blocking=False,
                                 skipped=True))
        return checks
    try:
        serving_logits, _ = _infer_rows(client, stored.boards, serving_version, serving_model)
    except TritonError as exc:
        checks.append(SmokeCheck(name, False, f"v{serving_version} did not answer: {exc}",
                                 blocking=False))
        return checks
    serving_hits = top1_hits(serving_logits, stored.boards, stored.moves)
    floor = gate.paired_floor(serving_hits, hits, tolerance)
    checks.append(SmokeCheck(
        name, top1 >= floor,
        f"top-1 {top1:.3f} vs serving v{serving_version}'s {serving_hits.mean():.3f} on {n} "
        f"rows, floor {floor:.3f} (- {tolerance} - 2 standard errors of the difference)"
        + ("" if compare_blocking else "; a rollback goes back on purpose"),
        blocking=compare_blocking))
    return checks


def _value_check(version: int, value_head: bool | None, values: list[np.ndarray | None]
                 ) -> SmokeCheck:
    """Finite values everywhere (blocking) when the version has a value head."""
    sent = [v for v in values if v is not None]
    if not sent:
        return SmokeCheck("value", True, "the config declares no value output",
                          blocking=False)
    allv = np.concatenate(sent)
    bad = int((~np.isfinite(allv)).sum())
    if value_head is False:
        return SmokeCheck("value", True, f"v{version} has no value head (NaN by design)",
                          blocking=False)
    if bad:
        detail = f"{bad} of {allv.size} values are NaN/Inf"
    else:
        detail = f"all {allv.size} values finite, range [{allv.min():.3g}, {allv.max():.3g}]"
    if value_head is None:
        return SmokeCheck("value", not bad, detail + f" (unknown whether v{version} has a value "
                          "head: its metadata does not say and model.pt could not be run here)",
                          blocking=False)
    return SmokeCheck("value", not bad, detail)


# --------------------------------------------------------------------------- state


def state_path(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> Path:
    return Path(repository) / model_name / STATE_FILE


def read_state(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> dict[str, Any]:
    """The serving record ``{"current", "previous", "history"}`` (empty values when none)."""
    path = state_path(repository, model_name)
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        state = {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"serving record {path} is unreadable: {exc}") from exc
    return {"model_name": model_name, "current": state.get("current"),
            "previous": state.get("previous"), "history": list(state.get("history", []))}


def _write_state(repository: Path, model_name: str, state: dict[str, Any]) -> None:
    path = state_path(repository, model_name)
    state = {**state, "history": state["history"][-HISTORY_LIMIT:],
             "updated_at": _now()}
    tmp = path.with_name(f".{STATE_FILE}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(json.dumps(state, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def quarantine(
    repository: Path,
    model_name: str,
    version: int,
    reason: str,
    smoke: list[SmokeCheck] | None = None,
    action: str = "rollout",
) -> Path:
    """Move ``<repo>/<model>/<version>/`` to ``<repo>/<model>/quarantine/<version>/`` (a
    numbered sibling, ``<version>-2``, when that name is taken) and write ``reason.json``
    there (reason, time, action, smoke checks); return the new folder.

    Triton looks at numeric folders only, so the version can no longer be loaded by a restart
    or a plain load, and `publisher.next_version` counts quarantined numbers. The move is one
    ``os.rename`` under the publishers' lock on the model folder."""
    model_dir = Path(repository) / model_name
    source = model_dir / str(version)
    folder = model_dir / QUARANTINE_DIR
    with locked_model_dir(repository, model_name):
        folder.mkdir(exist_ok=True)
        target, n = folder / str(version), 2
        while target.exists():
            target, n = folder / f"{version}-{n}", n + 1
        os.rename(source, target)
        _fsync_dir(model_dir)
        _fsync_dir(folder)
    record = {"model_name": model_name, "version": version, "action": action,
              "reason": reason, "at": _now(), "from": str(source),
              "smoke": [asdict(c) for c in smoke or []]}
    tmp = target / f".{QUARANTINE_REASON}.tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(record, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target / QUARANTINE_REASON)
    _fsync_dir(target)
    logger.warning("%s v%d quarantined in %s: %s", model_name, version, target, reason)
    return target


def quarantine_reason(folder: Path) -> str:
    """The reason recorded in a quarantine folder's ``reason.json`` ("reason unknown" when it
    cannot be read)."""
    try:
        reason = json.loads((Path(folder) / QUARANTINE_REASON).read_text()).get("reason")
    except (OSError, ValueError, AttributeError):
        reason = None
    return str(reason) if reason else "reason unknown"


def _version_name(version: Any) -> str:
    return "nothing" if version is None else f"v{version}"


def describe_event(event: dict[str, Any]) -> str:
    """One history event of ``rollout.json`` in plain words: "v7 replaced v6", "v8 refused
    (reason), v7 kept serving", "rolled back v8 -> v7"."""
    version, before = event.get("version"), event.get("serving")
    action, outcome = event.get("action"), event.get("outcome")
    if outcome == "serving":
        if action == "rollback":
            text = (f"rolled back {_version_name(before)} -> {_version_name(version)}"
                    if before is not None else
                    f"rolled back to {_version_name(version)} (nothing was serving)")
        elif before is None:
            text = f"{_version_name(version)} serving (nothing served before)"
        else:
            text = f"{_version_name(version)} replaced {_version_name(before)}"
    elif outcome == "refused":
        what = (f"rollback to {_version_name(version)}" if action == "rollback"
                else _version_name(version))
        kept = (f"{_version_name(before)} kept serving" if before is not None
                else "nothing was serving")
        text = f"{what} refused ({event.get('reason', 'no reason recorded')}), {kept}"
        if event.get("quarantined"):
            text += f"; moved to {event['quarantined']}"
    else:
        text = json.dumps(event)
    return f"{event.get('at', '?')}  {text}"


@contextlib.contextmanager
def _rollout_lock(repository: Path, model_name: str, timeout_s: float) -> Iterator[None]:
    model_dir = Path(repository) / model_name
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder {model_dir} does not exist")
    fd = os.open(model_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"another rollout of {model_name} holds "
                                       f"{model_dir / LOCK_FILE} (waited {timeout_s:.0f} s)"
                                       ) from exc
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- rollout


def current_version(client: PolicyClient, model_name: str | None = None) -> int | None:
    """The version Triton serves to requests without a version (highest READY), or None."""
    versions = [int(v) for v in client.ready_versions(model_name or client.model_name)
                if v.isdigit()]
    return max(versions) if versions else None


def rollout(
    client: PolicyClient,
    repository: Path,
    version: int,
    model_name: str = DEFAULT_MODEL_NAME,
    *,
    centre_radius: int | None = None,
    lock_timeout_s: float = 300.0,
    tolerance: float = gate.DEFAULT_TOLERANCE,
) -> RolloutReport:
    """Smoke-test `version` and make it the only version served; see the module docstring.
    `tolerance` is the gate's, for the top-1 and agreement checks.

    Raises `RolloutError` when the version is refused (the serving version keeps serving; a
    version refused for its own fault is quarantined), and `TritonError` subclasses only when
    Triton cannot be reached before anything changed.
    """
    repository = Path(repository)
    version = int(version)
    with _rollout_lock(repository, model_name, lock_timeout_s):
        return _rollout_locked(client, repository, version, model_name, centre_radius,
                               "rollout", [], tolerance)


def _rollout_locked(
    client: PolicyClient,
    repository: Path,
    version: int,
    model_name: str,
    centre_radius: int | None,
    action: str,
    notes: list[str],
    tolerance: float = gate.DEFAULT_TOLERANCE,
) -> RolloutReport:
    t0 = time.monotonic()
    phases: dict[str, float] = {}
    state = read_state(repository, model_name)
    ready_before = [int(v) for v in client.ready_versions(model_name) if v.isdigit()]
    serving = max(ready_before) if ready_before else None  # what unversioned requests get
    smoke: list[SmokeCheck] = []

    def refuse(reason: str, owned: bool = False) -> RolloutError:
        """Record the refusal; `owned`: the version's own fault, so it is quarantined (never
        the serving version)."""
        moved = None
        if owned and version != serving and (repository / model_name / str(version)).is_dir():
            try:
                moved = quarantine(repository, model_name, version, reason, smoke, action)
            except OSError as exc:
                reason += f" (could not quarantine it: {exc})"
        event = {"at": _now(), "action": action, "version": version, "serving": serving,
                 "outcome": "refused", "reason": reason}
        where = None
        if moved is not None:
            where = str(moved.relative_to(repository / model_name))
            event["quarantined"] = where
            if state["previous"] == version:
                state["previous"] = None  # never fall back to a quarantined version
        state["history"].append(event)
        if state["current"] is None or (moved is not None and state["current"] == version):
            state["current"] = serving
        _write_state(repository, model_name, state)
        logger.warning("%s of %s v%s refused: %s", action, model_name, version, reason)
        return RolloutError(f"{action} of {model_name} v{version} refused: {reason}",
                            model_name=model_name, version=version, serving=serving,
                            smoke=smoke, action=action, quarantined=where, cause=reason)

    def phase(name: str, since: float) -> float:
        now = time.monotonic()
        phases[name] = round(now - since, 3)
        return now

    # 1. files
    try:
        config = read_model_config(repository, model_name)
    except ValueError as exc:
        raise refuse(str(exc)) from exc  # the model's config, not the version's fault
    try:
        files, file_notes = check_version_files(repository, model_name, version)
        stored = stored_positions(files, config, version)
    except ValueError as exc:
        raise refuse(str(exc), owned=True) from exc
    notes += file_notes
    t = phase("files", t0)
    facts = {"stored": stored, "tolerance": tolerance}

    if serving == version:
        smoke, _ = smoke_test(client, model_name, version, centre_radius,
                              value_head=value_head_of(files, _smoke_boards(client, model_name)),
                              **facts)
        phase("smoke", t)
        if not all(c.passed for c in smoke if c.blocking):
            failed = ", ".join(c.name for c in smoke if c.blocking and not c.passed)
            raise refuse(f"v{version} already serves but fails the smoke test ({failed})")
        if state["current"] != version:
            state["current"] = version
            _write_state(repository, model_name, state)
        return RolloutReport(model_name, action, serving, version, smoke,
                             round(time.monotonic() - t0, 3), changed=False, phases=phases,
                             notes=[*notes, f"v{version} was already serving; nothing changed"])

    # 2. candidate under its own name, from the checked bytes
    candidate = f"{model_name}{CANDIDATE_SUFFIX}"
    try:
        try:
            client.load_model(
                candidate,
                config=config_json(config, [version], name=candidate),
                files={f"file:{version}/{n}": data for n, data in files.items()},
            )
        except TritonError as exc:
            raise refuse(f"Triton cannot load {repository / model_name / str(version)}: "
                         f"{_triton_reason(exc)}",
                         owned=exc.status != "DEADLINE_EXCEEDED"
                         and _reachable(client, model_name)) from exc
        t = phase("candidate load", t)
        # 3. smoke test
        smoke, reference = smoke_test(
            client, candidate, version, centre_radius,
            value_head=value_head_of(files, _smoke_boards(client, model_name)),
            serving_model=model_name, serving_version=serving,
            compare_blocking=action == "rollout", **facts)
        t = phase("smoke", t)
    finally:
        with contextlib.suppress(TritonError):
            client.unload_model(candidate)
    failed = [c for c in smoke if c.blocking and not c.passed]
    if failed:
        transient = any(c.name == "answers" and c.detail.startswith(TRANSIENT_PREFIX)
                        for c in failed)
        raise refuse("smoke test failed: " + "; ".join(f"{c.name}: {c.detail}" for c in failed),
                     owned=not transient and _reachable(client, model_name))

    # 4. switch: the same bytes must still be on disk
    try:
        again, _ = check_version_files(repository, model_name, version)
    except ValueError as exc:
        raise refuse(f"changed during the rollout: {exc}") from exc
    if _sha256(again["model.pt"]) != _sha256(files["model.pt"]):
        raise refuse(f"{repository / model_name / str(version) / 'model.pt'} changed during "
                     "the rollout")
    try:
        client.load_model(model_name, config=config_json(config, [version]))
    except TritonError as exc:
        _ensure_serving(client, config, model_name, serving, notes)
        raise refuse(f"Triton could not switch to v{version}: {_triton_reason(exc)}") from exc
    t = phase("switch", t)
    problem = _verify_switch(client, model_name, version, reference)
    if problem:
        _ensure_serving(client, config, model_name, serving, notes, force=True)
        back = "nothing serves" if serving is None else f"switched back to v{serving}"
        raise refuse(f"after the switch {problem}; {back}")
    smoke.append(SmokeCheck("serving", True, f"unversioned requests answered by v{version} "
                            "with the candidate's logits"))
    unloaded = [v for v in ready_before if v != version]
    phase("verify", t)

    # 5. record
    if serving is not None and serving != version:
        state["previous"] = serving
    state["current"] = version
    seconds = round(time.monotonic() - t0, 3)
    state["history"].append({"at": _now(), "action": action, "version": version,
                             "serving": serving, "outcome": "serving", "seconds": seconds})
    _write_state(repository, model_name, state)
    return RolloutReport(model_name, action, serving, version, smoke, seconds, changed=True,
                         phases=phases, unloaded=unloaded, notes=notes)


def _reachable(client: PolicyClient, model_name: str) -> bool:
    """Triton answers its repository index (a refusal then is not Triton's fault)."""
    try:
        client.ready_versions(model_name)
    except TritonError:
        return False
    return True


def _triton_reason(exc: TritonError) -> str:
    """Triton's own message, without our prefix and the python stub's traceback."""
    text = str(exc)
    text = text.split("]: ", 1)[-1] if "]: " in text else text
    return text.split("\n\nAt:", 1)[0].strip()


def _verify_switch(
    client: PolicyClient, model_name: str, version: int, reference: np.ndarray
) -> str | None:
    """None when unversioned requests are answered by `version` with the smoke logits."""
    boards = _smoke_boards(client, model_name)
    try:
        result = client.infer(boards, model_name=model_name)
    except TritonError as exc:
        return f"v{version} does not answer: {exc}"
    if result.model_version != str(version):
        return f"v{result.model_version} answered instead of v{version}"
    if not np.allclose(result.logits, reference, rtol=1e-4, atol=_CONSISTENCY_ATOL):
        diff = float(np.nanmax(np.abs(result.logits - reference)))
        return f"v{version} answers differ from the smoke-tested candidate by {diff:.3g}"
    return None


def _ensure_serving(
    client: PolicyClient,
    config: Any,
    model_name: str,
    serving: int | None,
    notes: list[str],
    force: bool = False,
) -> None:
    """Make sure `serving` (the version before the rollout) is the one served again."""
    if serving is None:
        with contextlib.suppress(TritonError):
            client.unload_model(model_name)
        return
    if not force and current_version(client, model_name) == serving:
        return  # Triton kept it: a failed load leaves the serving versions as they were
    try:
        client.load_model(model_name, config=config_json(config, [serving]))
    except TritonError as exc:
        notes.append(f"could not restore v{serving}: {exc}")


def rollback(
    client: PolicyClient,
    repository: Path,
    model_name: str = DEFAULT_MODEL_NAME,
    *,
    lock_timeout_s: float = 300.0,
    tolerance: float = gate.DEFAULT_TOLERANCE,
) -> RolloutReport:
    """Roll out the version that served before the current one (smoke-tested like any other;
    the agreement with the version it replaces is informational: a rollback goes back on
    purpose).

    The target is the recorded ``previous`` version; if Triton serves something other than the
    recorded ``current`` (loaded outside `rollout`), the recorded ``current``; with no record,
    the highest published version below the serving one. Two rollbacks in a row swap back.
    """
    repository = Path(repository)
    with _rollout_lock(repository, model_name, lock_timeout_s):
        state = read_state(repository, model_name)
        serving = current_version(client, model_name)
        notes: list[str] = []
        if serving is None:
            target = state["current"]
            notes.append(f"nothing was serving; restoring the recorded current v{target}")
        elif state["current"] == serving:
            target = state["previous"]
        elif state["current"] is not None:
            target = state["current"]
            notes.append(f"v{serving} was loaded outside rollout; back to the recorded "
                         f"v{target}")
        else:
            lower = [v for v in list_versions(repository, model_name) if v < serving]
            target = lower[-1] if lower else None
            notes.append(f"no serving record; back to the newest published version below "
                         f"v{serving}")
        if target is None:
            raise RolloutError(
                f"rollback of {model_name} refused: no previous version is known "
                f"(serving {serving}, record {state_path(repository, model_name)})",
                model_name=model_name, version=None, serving=serving, action="rollback")
        return _rollout_locked(client, repository, int(target), model_name, None, "rollback",
                               notes, tolerance)
