"""The smoke test a model version passes before it serves (`smoke_test`, see
`services.triton.rollout` for where it runs).

Its game (`services.games.base.Game`, the one the client serves the model for) gives the known
positions (`Game.smoke_positions`) and the positions with a forced answer
(`Game.tactical_positions`): the game's basic inputs, which the client sends in the input
encoder the model's config declares (`PolicyClient.encode`); the positions stored with the
version travel as they were stored (in that input already). The checks: answers from the asked
version, shape, finite logits, a well-formed masked policy, the same answer alone, in a batch
and on a repeat, the empty board's top move, tactics, a finite value from a value head, and
top-1 and agreement with the serving version on the real positions stored with the version.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from services.defaults import MODEL_FILE
from services.games.base import Game
from services.games.registry import get_game
from services.numerics import masked_softmax
from services.repository import gate
from services.repository.model_check import load_model
from services.repository.smoke_positions import SMOKE_POSITIONS_FILE, StoredPositions
from services.repository.version_files import version_metadata
from services.triton.client import PolicyClient, TritonError, TritonUnavailableError

logger = logging.getLogger(__name__)
CONSISTENCY_ATOL = 1e-4
# A tactical answer must be among the raw policy's 5 best legal points: Predict lists 5 moves
# by default (top_k 0 means 5), so a client reading Predict sees the win or the block; a trained
# network puts it first (the demo's network ranks every one 1st), an untrained or broken one
# scatters it over ~200 empty points.
TACTICAL_TOP_K = 5
_INFER_ROWS = 64  # stored positions are sent in requests of this many boards


@dataclass(frozen=True)
class SmokeCheck:
    name: str
    passed: bool
    detail: str
    blocking: bool = True  # informational checks never refuse a version
    skipped: bool = False  # not run (what it needs is missing); `detail` says why


def checks_markdown(checks: list[SmokeCheck]) -> str:
    rows = []
    for c in checks:
        result = "not checked" if c.skipped else (
            ("pass" if c.passed else "FAIL") + ("" if c.blocking else " (info)"))
        detail = c.detail.replace("|", "\\|")
        rows.append(f"| {c.name} | {result} | {detail} |")
    return "\n".join(["| smoke check | result | detail |", "|---|---|---|", *rows])


def smoke_positions(game: Game) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What `smoke_test` asks a version of `game`'s model about: {name: (network input, legal
    mask over the policy)} (`Game.smoke_positions`)."""
    return game.smoke_positions()


def model_game(client: PolicyClient, model_name: str) -> Game:
    """The game `client` serves `model_name` for (`PolicyClient.io_of`)."""
    return get_game(client.io_of(model_name).game)


def smoke_boards(client: PolicyClient, model_name: str) -> np.ndarray:
    """The boards `smoke_test` sends to `model_name` (its game's `smoke_positions`)."""
    known = smoke_positions(model_game(client, model_name))
    return np.stack([b for b, _ in known.values()])


def masked_policy(logits: np.ndarray, boards: np.ndarray) -> np.ndarray:
    """Softmax over empty points (as the search service computes it); 0 on stones."""
    return masked_softmax(logits, boards.reshape(len(boards), -1) == 0)


def value_head_of(files: dict[str, bytes], boards: np.ndarray) -> bool | None:
    """Whether the version's network has a value head: its metadata's ``value_head``, else
    found by running ``model.pt`` here on `boards` (None when that fails too)."""
    recorded = version_metadata(files).get("value_head")
    if isinstance(recorded, bool):
        return recorded
    try:
        import torch

        model = load_model(files[MODEL_FILE])
        with torch.inference_mode():
            out = model(torch.from_numpy(np.ascontiguousarray(boards[:1])))
    except Exception as exc:  # any failure: unknown, and Triton's answers decide
        logger.info("cannot tell whether the model has a value head: %s", exc)
        return None
    return isinstance(out, (tuple, list))


def top1_hits(logits: np.ndarray, boards: np.ndarray, moves: np.ndarray, game: Game
               ) -> np.ndarray:
    """Per row, whether the best unoccupied point (a pass always counts) is the move played:
    the trainer's top-1 (`services.trainer.metrics.evaluate`), in numpy. `boards` are network
    inputs of `game`, whose stones it reads (`Game.stone_cells`)."""
    stones = game.stone_cells(boards)
    occupied = stones.reshape(len(boards), -1) != 0
    extra = logits.shape[1] - occupied.shape[1]
    if extra:
        occupied = np.pad(occupied, ((0, 0), (0, extra)))
    masked = np.where(occupied, -np.inf, logits.astype(np.float64))
    return np.argmax(masked, axis=1) == moves


def masked_policy_legal(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Softmax over the legal entries of each row (`legal`: bool, same shape); 0 elsewhere."""
    return masked_softmax(logits, legal)


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
    gate's (`services.repository.gate`).
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
        ok = bool(np.isfinite(diff) and diff <= CONSISTENCY_ATOL * scale)
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
        checks += _stored_checks(client, game, model_name, version, stored, serving_model,
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
    """(logits, values or None) of the stored `boards`, sent `_INFER_ROWS` at a time as they
    are (they were stored in the model's input, its encoder's)."""
    logits, values = [], []
    for i in range(0, len(boards), _INFER_ROWS):
        r = client.infer(boards[i:i + _INFER_ROWS], model_version=version,
                         model_name=model_name, encoded=True)
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
    """`tactics_check` on the answers of `version` to the game's `tactical_positions` (also
    returns the values Triton sent)."""
    boards = np.stack([b for b, _ in game.tactical_positions().values()])
    result = client.infer(boards, model_version=version, model_name=model_name)
    return tactics_check(game, result.logits), result.values


def tactical_margins(game: Game, logits: np.ndarray) -> dict[str, float]:
    """Per tactical position, how far its best right answer's logit lies above the
    `TACTICAL_TOP_K`-th best other legal point: > 0 exactly when the answer is among the
    `TACTICAL_TOP_K` best (the check passes), and the size of the lead tells how far a network
    is from failing it (a float path or a seed moves a logit by a fraction of one)."""
    margins = {}
    for (name, (board, answers)), row in zip(game.tactical_positions().items(), logits,
                                             strict=True):
        scores = np.where(board.reshape(-1) == 0, row.astype(np.float64), -np.inf)
        others = np.sort(np.delete(scores, list(answers)))[::-1]
        margins[name] = float(max(scores[a] for a in answers) - others[TACTICAL_TOP_K - 1])
    return margins


def tactics_check(game: Game, logits: np.ndarray) -> SmokeCheck:
    """Every answer of the game's `tactical_positions` among the raw policy's
    `TACTICAL_TOP_K` best legal points (blocking), given the network's `logits` on them."""
    tactics = game.tactical_positions()
    size = game.default_size

    def _name(move: int) -> str:
        return game.move_name(move, size)

    k = TACTICAL_TOP_K
    if not np.isfinite(logits).all():
        return SmokeCheck("tactics", False, "non-finite logits on the tactical positions")
    ranks, misses = [], []
    for (name, (board, answers)), row in zip(tactics.items(), logits, strict=True):
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
    return SmokeCheck("tactics", not misses, detail)


def _stored_checks(
    client: PolicyClient,
    game: Game,
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
    hits = top1_hits(logits, stored.boards, stored.moves, game)
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
    serving_hits = top1_hits(serving_logits, stored.boards, stored.moves, game)
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
