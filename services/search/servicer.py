"""gRPC servicer of `movepred.v1.SearchService`: validation, the policy network, the search.

Every request is validated before any inference (bad requests get INVALID_ARGUMENT naming the
field, even while Triton is down). Error mapping:

* `InvalidRequest` (and a finished game)          -> INVALID_ARGUMENT "<field>: <message>"
* `TritonUnavailableError` (refused, down, late)  -> UNAVAILABLE "Triton is unreachable: ..."
* `TritonRequestError` / unusable evaluator reply -> INTERNAL

Nothing about a failure is cached: every request calls the evaluator afresh, so the service
recovers by itself as soon as Triton answers again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc
import numpy as np

from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.games.coords import index_name
from services.games.gomoku import BLACK, GomokuState
from services.search import mcts, validation
from services.triton.client import TritonRequestError, TritonUnavailableError

T = TypeVar("T")

# Part of the request deadline kept back for building and sending the GenMove reply.
DEADLINE_MARGIN_FRACTION = 0.1
DEADLINE_MARGIN_MAX_S = 0.25


def _point(index: int, size: int) -> search_pb2.Point:
    return search_pb2.Point(x=index % size, y=index // size)


def _color(color: int) -> search_pb2.Color.ValueType:
    return search_pb2.BLACK if color == BLACK else search_pb2.WHITE


def top_moves(policy: np.ndarray, legal: np.ndarray, k: int) -> list[int]:
    """The k most probable legal points; ties go to the lower point index."""
    points = np.flatnonzero(legal)
    order = np.lexsort((points, -policy[points]))
    return [int(points[i]) for i in order[:k]]


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    """Answers Predict with the network's policy and GenMove with a PUCT search."""

    def __init__(
        self,
        evaluator: mcts.PolicyEvaluator,
        *,
        batch_size: int = mcts.DEFAULT_BATCH_SIZE,
        c_puct: float = mcts.DEFAULT_C_PUCT,
    ) -> None:
        self.evaluator = evaluator
        self.batch_size = batch_size
        self.c_puct = c_puct

    def Predict(
        self, request: search_pb2.PredictRequest, context: grpc.ServicerContext
    ) -> search_pb2.PredictResponse:
        return _handle(context, lambda: self._predict(request))

    def GenMove(
        self, request: search_pb2.GenMoveRequest, context: grpc.ServicerContext
    ) -> search_pb2.GenMoveResponse:
        return _handle(context, lambda: self._genmove(request, context.time_remaining()))

    def _predict(self, request: search_pb2.PredictRequest) -> search_pb2.PredictResponse:
        state, k = validation.predict_request(request)
        out = self.evaluator.infer(state.board[np.newaxis].astype(np.int8))
        logits = np.asarray(out.logits, dtype=np.float32)
        if logits.shape != (1, state.size * state.size):
            raise mcts.EvaluatorError(f"evaluator returned logits of shape {logits.shape}")
        legal = state.legal_mask()
        policy = mcts.masked_softmax(logits[0], legal)
        return search_pb2.PredictResponse(
            policy=policy.astype(np.float32).tolist(),
            top_moves=[
                search_pb2.MoveProbability(
                    point=_point(p, state.size),
                    name=index_name(p, state.size),
                    probability=float(policy[p]),
                )
                for p in top_moves(policy, legal, k)
            ],
            to_move=_color(state.to_move),
            model_name=str(out.model_name),
            model_version=str(out.model_version),
        )

    def _genmove(
        self, request: search_pb2.GenMoveRequest, time_remaining: float | None
    ) -> search_pb2.GenMoveResponse:
        state, budget = validation.genmove_request(request)
        deadline = None
        if time_remaining is not None:
            margin = min(DEADLINE_MARGIN_MAX_S, DEADLINE_MARGIN_FRACTION * time_remaining)
            deadline = time.monotonic() + max(0.0, time_remaining - margin)
        result = mcts.search(
            state,
            self.evaluator,
            max_visits=budget.max_visits,
            max_time_ms=budget.max_time_ms,
            deadline=deadline,
            c_puct=self.c_puct,
            batch_size=self.batch_size,
        )
        return genmove_response(state, result)


def genmove_response(state: GomokuState, result: mcts.SearchResult) -> search_pb2.GenMoveResponse:
    size = state.size
    return search_pb2.GenMoveResponse(
        move=_point(result.move, size),
        name=index_name(result.move, size),
        color=_color(state.to_move),
        visits=result.visits,
        total_visits=result.total_visits,
        prior=result.prior,
        value=result.value,
        principal_variation=[_point(p, size) for p in result.principal_variation],
        principal_variation_names=[index_name(p, size) for p in result.principal_variation],
        model_name=result.model_name,
        model_version=result.model_version,
    )


def _handle(context: grpc.ServicerContext, work: Callable[[], T]) -> T:
    """Run `work`, turning the known failures into gRPC status codes."""
    try:
        return work()
    except validation.InvalidRequest as exc:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except mcts.GameOverError as exc:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"position: {exc}")
    except TritonUnavailableError as exc:
        context.abort(grpc.StatusCode.UNAVAILABLE, f"Triton is unreachable: {exc}")
    except (TritonRequestError, mcts.EvaluatorError) as exc:
        context.abort(grpc.StatusCode.INTERNAL, f"policy network failed: {exc}")
    raise AssertionError("context.abort always raises")  # pragma: no cover
