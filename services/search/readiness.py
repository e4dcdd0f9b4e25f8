"""gRPC health that tells the truth: a watcher polling the models' readiness on Triton.

The search service can only answer while Triton serves its models, so its health per service
name follows what Triton says, not merely that the process runs:

* ``""``: SERVING while the process runs (the liveness probe: restarting the search service
  does not bring Triton or a model back, so a dead Triton must not get it killed);
* ``movepred.v1.SearchService/<game>`` (``.../gomoku``, ``.../go``), one per game the server
  is configured for: SERVING while that game's model has a READY version on Triton,
  NOT_SERVING while Triton is unreachable or the model is not loaded (a game the server does
  not serve has no name: NOT_FOUND);
* ``movepred.v1.SearchService``: SERVING when *every* configured game is (the readiness
  probe of a deployment that must answer all its games; run with ``--go-model ""`` when Go is
  not meant to be served).

`ReadinessWatcher` polls each model through its evaluator's own Triton client
(`PolicyClient.model_readiness`) every `interval_s` (0.2 s) with a short timeout, so health
turns SERVING again within about a second of Triton or the model coming back, and stops with
the service. Its first poll is the start-up check: it logs which models are ready and, for
each one that is not, why and what to run; the service starts anyway (Triton may come later).
Every later change is logged too. An evaluator without `model_readiness` (an in-process
network, as in tests and benchmarks) is always ready.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from grpc_health.v1 import health, health_pb2

from services.search.metrics import Metrics

logger = logging.getLogger(__name__)

SERVICE_NAME = "movepred.v1.SearchService"
DEFAULT_INTERVAL_S = 0.2
DEFAULT_TIMEOUT_S = 0.5
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

# What an operator runs when a game's model is missing (docs/reference.md's typical session).
REMEDY = (
    "start Triton (`make triton`), publish a version (`make train`, or "
    "`python -m services.trainer.publish --game go` for Go) and load it (`movepred rollout`); "
    "or start the search service with the right --model/--go-model"
)

Probe = Callable[[float], tuple[bool, str]]


def game_service_name(game: str) -> str:
    """The health service name of one game: ``movepred.v1.SearchService/<game>``."""
    return f"{SERVICE_NAME}/{game}"


def probe_of(evaluator: Any) -> Probe | None:
    """The evaluator's readiness check (`PolicyClient.model_readiness`), None when it has
    none (then the game counts as always ready)."""
    check = getattr(evaluator, "model_readiness", None)
    return check if callable(check) else None


def describe(evaluator: Any) -> str:
    """"model gomoku_policy on Triton at 127.0.0.1:8001", as far as the evaluator tells."""
    name = getattr(evaluator, "model_name", None)
    url = getattr(evaluator, "url", None)
    if name is None:
        return type(evaluator).__name__
    return f"model {name}" + (f" on Triton at {url}" if url else "")


class ReadinessWatcher:
    """Keeps the health statuses of the search service in step with its models' readiness."""

    def __init__(
        self,
        servicer: health.HealthServicer,
        evaluators: Mapping[str, Any],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        metrics: Metrics | None = None,
    ) -> None:
        """`evaluators`: game ("gomoku", "go") -> its evaluator, for every configured game."""
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError(f"need interval_s > 0 and timeout_s > 0, got {interval_s} "
                             f"{timeout_s}")
        self.servicer = servicer
        self.evaluators = dict(evaluators)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.metrics = metrics
        self.ready: dict[str, bool | None] = {game: None for game in self.evaluators}
        self.reasons: dict[str, str] = {}
        self.polls = 0
        self._overall: bool | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        servicer.set("", SERVING)
        # unknown until the first poll: not ready (a probe-less evaluator is ready at once)
        for game, evaluator in self.evaluators.items():
            self._set(game, probe_of(evaluator) is None)
        self._publish_overall()

    # ------------------------------------------------------------------ life cycle
    def start(self) -> ReadinessWatcher:
        if self._thread is None and any(probe_of(e) for e in self.evaluators.values()):
            self._thread = threading.Thread(target=self._run, name="movepred-health",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling (the service is stopping: every name goes NOT_SERVING)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s * len(self.evaluators) + 5)
            self._thread = None
        self.servicer.enter_graceful_shutdown()

    def _run(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                self.poll(first)
            except Exception:  # a bug here must not end health updates for good
                logger.exception("health poll failed")
            first = False
            self._stop.wait(self.interval_s)

    # ------------------------------------------------------------------ polling
    def poll(self, first: bool = False) -> dict[str, bool]:
        """Ask every model once and update the statuses; `first`: log the start-up report."""
        now: dict[str, bool] = {}
        for game, evaluator in self.evaluators.items():
            probe = probe_of(evaluator)
            ready, reason = (True, "") if probe is None else probe(self.timeout_s)
            now[game] = ready
            self._update(game, evaluator, ready, reason, first)
        self._publish_overall()
        self.polls += 1
        return now

    def _update(self, game: str, evaluator: Any, ready: bool, reason: str, first: bool) -> None:
        before = self.ready.get(game)
        self.reasons[game] = reason
        if before is ready and not first:
            return
        self._set(game, ready)
        what = describe(evaluator)
        name = game_service_name(game)
        fields = {"game": game, "health_service": name, "ready": ready, "reason": reason}
        if first and ready:
            logger.info("start-up check: %s: %s is ready", game, what, extra=fields)
        elif first:
            logger.warning("start-up check: %s: %s is not ready (%s); health of %s is "
                           "NOT_SERVING until it is: %s", game, what, reason, name, REMEDY,
                           extra=fields)
        elif ready:
            logger.info("%s: %s is ready again; health of %s is SERVING", game, what, name,
                        extra=fields)
        else:
            logger.warning("%s: %s is no longer ready (%s); health of %s is NOT_SERVING",
                           game, what, reason, name, extra=fields)

    def _set(self, game: str, ready: bool) -> None:
        self.ready[game] = ready
        self.servicer.set(game_service_name(game), SERVING if ready else NOT_SERVING)
        if self.metrics is not None:
            self.metrics.model_ready.labels(game).set(1 if ready else 0)

    def _publish_overall(self) -> None:
        every = bool(self.ready) and all(self.ready.values())
        if every is not self._overall:  # a set() notifies every Watch stream: only on change
            self._overall = every
            self.servicer.set(SERVICE_NAME, SERVING if every else NOT_SERVING)
