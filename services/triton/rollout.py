"""Roll a published model version into Triton, smoke-tested first, and roll it back.

`rollout(client, repository, version)` moves serving from the version Triton serves now (the
highest READY version of the model) to `version`, in five steps:

1. **Files.** ``<repo>/<model>/<version>/`` must hold ``model.py`` and ``model.pt``; ``model.pt``
   must be an intact zip archive (every member's CRC is checked, which catches truncated or
   bit-flipped TorchScript files) and, when ``metadata.json`` records a ``sha256``, match it.
   The input encoder its ``metadata.json`` records must be the one the model's config
   declares (`require_served_input`): the version is refused, not quarantined, otherwise.
2. **Candidate.** The version is loaded under a separate model name
   (``<model>__candidate``) from the bytes just checked (repository API with a config and files
   override), so production traffic never reaches it: a request without an explicit version is
   answered by the *highest* READY version of a model, so loading the candidate next to the
   serving version under the same name would hand it the traffic before it is tested. A file
   Triton cannot load is refused here, with Triton's reason.
3. **Smoke test** on the candidate (`smoke_test`): the known positions of the model's game
   (`Game.smoke_positions`: Gomoku int8 [15, 15] boards, Go compact int8 [4, 19, 19] inputs,
   sent in the input encoder the model's config declares: Go's extended [10, 19, 19] for
   ``go_policy_extended``)
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
   them). The record is the truth about what serves: the launcher (`services.triton.launcher`)
   starts Triton pinned to its ``current``, so a restart serves what the last rollout chose.

The jobs live in modules of their own: `services.repository.version_files` (step 1), `smoke`
(step 3), `services.repository.rollout_state` (the record and the lock, step 5) and
`services.repository.quarantine`; this module loads, switches and runs the transaction
(`_rollout_locked`, one function per step).

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
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from services.defaults import CANDIDATE_SUFFIX
from services.repository import gate
from services.repository.configs import CONFIG_FILE, config_encoder, parse_config
from services.repository.quarantine import QUARANTINE_REASON, quarantine
from services.repository.rollout_state import (
    keep_pinned,
    now_text,
    read_state,
    rollout_lock,
    state_path,
    write_state,
)
from services.repository.smoke_positions import StoredPositions, stored_positions
from services.repository.version_files import (
    check_version_files,
    require_served_input,
    sha256_bytes,
)
from services.repository.versions import DEFAULT_MODEL_NAME, list_versions
from services.triton.client import PolicyClient, TritonError
from services.triton.smoke import (
    CONSISTENCY_ATOL,
    TRANSIENT_PREFIX,
    SmokeCheck,
    checks_markdown,
    model_game,
    smoke_boards,
    smoke_test,
    value_head_of,
)

logger = logging.getLogger(__name__)


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


def read_model_config(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> Any:
    """The on-disk ``config.pbtxt`` as a ``ModelConfig`` protobuf."""
    return parse_config(Path(repository) / model_name / CONFIG_FILE)


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
    with rollout_lock(repository, model_name, lock_timeout_s):
        return _rollout_locked(client, repository, version, model_name, centre_radius,
                               "rollout", [], tolerance)


@dataclass
class _Attempt:
    """One rollout (or rollback) of `version` while the model's rollout lock is held: what it
    found (the record, what served), what it learnt (smoke checks, notes, seconds per phase)
    and how it ends (`refuse`, or `record`)."""

    client: PolicyClient
    repository: Path
    model_name: str
    version: int
    action: str
    notes: list[str]
    tolerance: float
    state: dict[str, Any] = field(init=False)
    ready_before: list[int] = field(init=False)
    serving: int | None = field(init=False)  # what unversioned requests get
    smoke: list[SmokeCheck] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.state = read_state(self.repository, self.model_name)
        self.ready_before = [int(v) for v in self.client.ready_versions(self.model_name)
                             if v.isdigit()]
        self.serving = max(self.ready_before) if self.ready_before else None

    def phase(self, name: str, since: float) -> float:
        """Record the seconds of phase `name` (begun at `since`); returns now."""
        now = time.monotonic()
        self.phases[name] = round(now - since, 3)
        return now

    def refuse(self, reason: str, owned: bool = False) -> RolloutError:
        """Record the refusal; `owned`: the version's own fault, so it is quarantined. A
        version refused for its own fault while it serves (loaded outside `rollout`, e.g. by
        the launcher at start) is unloaded first: a refused model never serves, even if
        nothing serves then. The refused version is never recorded as current."""
        repository, model_name, version, state = (self.repository, self.model_name,
                                                  self.version, self.state)
        if owned and version == self.serving:
            failed = self.take_down()
            reason += ("; it was serving: unloaded, nothing serves until another rollout"
                       if failed is None else
                       f"; it was serving and could not be unloaded: {failed}")
        moved = None
        if owned and version != self.serving and (repository / model_name / str(version)).is_dir():
            try:
                moved = quarantine(repository, model_name, version, reason, self.smoke,
                                   self.action)
            except OSError as exc:
                reason += f" (could not quarantine it: {exc})"
        event = {"at": now_text(), "action": self.action, "version": version,
                 "serving": self.serving, "outcome": "refused", "reason": reason}
        where = None
        if moved is not None:
            where = str(moved.relative_to(repository / model_name))
            event["quarantined"] = where
            if state["previous"] == version:
                state["previous"] = None  # never fall back to a quarantined version
        state["history"].append(event)
        if state["current"] == version and (owned or self.serving != version):
            state["current"] = None  # refused for its own fault, or no longer serving
        if state["current"] is None and self.serving != version:
            state["current"] = self.serving
        write_state(repository, model_name, state)
        logger.warning("%s of %s v%s refused: %s", self.action, model_name, version, reason)
        return RolloutError(f"{self.action} of {model_name} v{version} refused: {reason}",
                            model_name=model_name, version=version, serving=self.serving,
                            smoke=self.smoke, action=self.action, quarantined=where,
                            cause=reason)

    def take_down(self) -> TritonError | None:
        """Unload the model, so that nothing serves (the refused version answered); the
        error when Triton would not."""
        try:
            self.client.unload_model(self.model_name)
        except TritonError as exc:
            return exc
        self.serving = None
        return None

    def report(self, changed: bool, unloaded: list[int] | None = None) -> RolloutReport:
        return RolloutReport(self.model_name, self.action, self.serving, self.version,
                             self.smoke, round(time.monotonic() - self.started, 3),
                             changed=changed, phases=self.phases, unloaded=unloaded or [],
                             notes=self.notes)


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
    """The five steps of the module docstring, under the model's rollout lock."""
    a = _Attempt(client, repository, model_name, version, action, notes, tolerance)
    config, files, stored = _checked_files(a)
    t = a.phase("files", a.started)
    if a.serving == version:
        return _check_serving(a, config, files, stored, centre_radius, t)
    reference = _smoke_test_candidate(a, config, files, stored, centre_radius, t)
    _switch(a, config, files, reference)
    return _record(a)


def _checked_files(a: _Attempt) -> tuple[Any, dict[str, bytes], StoredPositions | None]:
    """1. The model's config, the version's checked bytes and its stored positions."""
    try:
        config = read_model_config(a.repository, a.model_name)
    except ValueError as exc:
        raise a.refuse(str(exc)) from exc  # the model's config, not the version's fault
    try:
        files, file_notes = check_version_files(a.repository, a.model_name, a.version)
        stored = stored_positions(files, config, a.version, model_game(a.client, a.model_name))
    except ValueError as exc:
        raise a.refuse(str(exc), owned=True) from exc
    try:
        require_served_input(files, a.version, config_encoder(config))
    except ValueError as exc:  # a sound network of another input: refused, not quarantined
        raise a.refuse(str(exc)) from exc
    a.notes += file_notes
    return config, files, stored


def _local_boards(a: _Attempt, config: Any) -> np.ndarray:
    """The smoke test's boards in the input the model's config declares (`config_encoder`):
    what ``model.pt`` is run on here when its metadata does not say whether it has a value
    head (`value_head_of`)."""
    boards = smoke_boards(a.client, a.model_name)
    return model_game(a.client, a.model_name).encode_inputs(boards, config_encoder(config))


def _check_serving(a: _Attempt, config: Any, files: dict[str, bytes],
                   stored: StoredPositions | None, centre_radius: int | None, since: float
                   ) -> RolloutReport:
    """The version serves already: smoke-test it where it serves, record it as current."""
    a.smoke, _ = smoke_test(
        a.client, a.model_name, a.version, centre_radius,
        value_head=value_head_of(files, _local_boards(a, config)),
        stored=stored, tolerance=a.tolerance)
    a.phase("smoke", since)
    failed = [c for c in a.smoke if c.blocking and not c.passed]
    if failed:
        raise a.refuse(f"v{a.version} already serves but fails the smoke test "
                       f"({', '.join(c.name for c in failed)})", owned=_own_fault(a, failed))
    if a.state["current"] != a.version:
        a.state["current"] = a.version
        write_state(a.repository, a.model_name, a.state)
    else:  # the record stands; a stale pin (a new config.pbtxt) is brought up to date
        keep_pinned(a.repository, a.model_name, a.version)
    a.notes.append(f"v{a.version} was already serving; nothing changed")
    return a.report(changed=False)


def _smoke_test_candidate(a: _Attempt, config: Any, files: dict[str, bytes],
                          stored: StoredPositions | None, centre_radius: int | None,
                          since: float) -> np.ndarray:
    """2.-3. Load the checked bytes as the side model ``<model>__candidate`` (no production
    traffic reaches it), smoke-test it, unload it; returns its logits on the known positions
    (what the switched model must answer)."""
    client, model_name, version = a.client, a.model_name, a.version
    candidate = f"{model_name}{CANDIDATE_SUFFIX}"
    try:
        try:
            client.load_model(
                candidate,
                config=config_json(config, [version], name=candidate),
                files={f"file:{version}/{n}": data for n, data in files.items()},
            )
        except TritonError as exc:
            raise a.refuse(f"Triton cannot load {a.repository / model_name / str(version)}: "
                           f"{_triton_reason(exc)}",
                           owned=exc.status != "DEADLINE_EXCEEDED"
                           and _reachable(client, model_name)) from exc
        t = a.phase("candidate load", since)
        a.smoke, reference = smoke_test(
            client, candidate, version, centre_radius,
            value_head=value_head_of(files, _local_boards(a, config)),
            serving_model=model_name, serving_version=a.serving,
            compare_blocking=a.action == "rollout", stored=stored, tolerance=a.tolerance)
        a.phase("smoke", t)
    finally:
        with contextlib.suppress(TritonError):
            client.unload_model(candidate)
    failed = [c for c in a.smoke if c.blocking and not c.passed]
    if failed:
        raise a.refuse("smoke test failed: " + "; ".join(f"{c.name}: {c.detail}"
                                                         for c in failed),
                       owned=_own_fault(a, failed))
    return reference


def _own_fault(a: _Attempt, failed: list[SmokeCheck]) -> bool:
    """Failed smoke checks are the version's fault unless the model did not answer in time
    (a slow or busy Triton) or Triton itself no longer answers."""
    transient = any(c.name == "answers" and c.detail.startswith(TRANSIENT_PREFIX)
                    for c in failed)
    return not transient and _reachable(a.client, a.model_name)


def _switch(a: _Attempt, config: Any, files: dict[str, bytes], reference: np.ndarray) -> None:
    """4. Serve the version (the same bytes must still be on disk), then check that
    unversioned requests get its answers; on failure, back to what served."""
    client, model_name, version = a.client, a.model_name, a.version
    t = time.monotonic()
    try:
        again, _ = check_version_files(a.repository, model_name, version)
    except ValueError as exc:
        raise a.refuse(f"changed during the rollout: {exc}") from exc
    changed = sorted(n for n in again.keys() | files.keys()
                     if n not in again or n not in files
                     or sha256_bytes(again[n]) != sha256_bytes(files[n]))
    if changed:  # Triton loads every file of the folder, model.py included, not only model.pt
        folder = a.repository / model_name / str(version)
        raise a.refuse(f"{', '.join(str(folder / n) for n in changed)} changed during the "
                       "rollout")
    try:
        client.load_model(model_name, config=config_json(config, [version]))
    except TritonError as exc:
        back = _switch_back(a, config)
        raise a.refuse(f"Triton could not switch to v{version}: {_triton_reason(exc)}"
                       + (f"; {back}" if back else "")) from exc
    t = a.phase("switch", t)
    problem = _verify_switch(client, model_name, version, reference)
    if problem:
        raise a.refuse(f"after the switch {problem}; {_switch_back(a, config, force=True)}")
    a.smoke.append(SmokeCheck("serving", True, f"unversioned requests answered by v{version} "
                              "with the candidate's logits"))
    a.phase("verify", t)


def _switch_back(a: _Attempt, config: Any, force: bool = False) -> str:
    """After a failed switch: what served before serves again, or, when Triton will not
    restore it and the refused version answers (a load that finished after its deadline, a
    failed reload), nothing serves. What happened, for the refusal ("" when nothing had
    changed)."""
    client, model_name = a.client, a.model_name
    _ensure_serving(client, config, model_name, a.serving, a.notes, force=force)
    try:
        now = current_version(client, model_name)
    except TritonError as exc:
        return f"Triton cannot say what serves now ({exc})"
    if now == a.version:  # the refused version answers: it must not
        before = a.serving
        failed = a.take_down()
        if failed is not None:
            return f"v{a.version} still serves and could not be unloaded: {failed}"
        return (f"v{before} could not be restored: unloaded, nothing serves"
                if before is not None else "unloaded, nothing serves")
    if now is None:
        return "nothing serves"
    return f"switched back to v{now}" if force or now != a.serving else ""


def _record(a: _Attempt) -> RolloutReport:
    """5. The version is current, the one before it previous, and the event in the history."""
    state = a.state
    if a.serving is not None and a.serving != a.version:
        state["previous"] = a.serving
    state["current"] = a.version
    report = a.report(changed=True, unloaded=[v for v in a.ready_before if v != a.version])
    state["history"].append({"at": now_text(), "action": a.action, "version": a.version,
                             "serving": a.serving, "outcome": "serving",
                             "seconds": report.seconds})
    write_state(a.repository, a.model_name, state)
    return report


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
    boards = smoke_boards(client, model_name)
    try:
        result = client.infer(boards, model_name=model_name)
    except TritonError as exc:
        return f"v{version} does not answer: {exc}"
    if result.model_version != str(version):
        return f"v{result.model_version} answered instead of v{version}"
    if not np.allclose(result.logits, reference, rtol=1e-4, atol=CONSISTENCY_ATOL):
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
    with rollout_lock(repository, model_name, lock_timeout_s):
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
