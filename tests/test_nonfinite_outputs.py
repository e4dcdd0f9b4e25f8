"""Non-finite network outputs are an error, never an answer.

A broken model (diverged weights, a bad export) used to be served: NaN logits went through the
masked softmax as a uniform policy with status OK. Now:

* the search service checks every answer (stock Triton deployments run without our model.py):
  NaN/Inf logits, or a NaN/Inf value next to finite ones, fail the request with INTERNAL naming
  the model and version, counted in `movepred_nonfinite_outputs_total{model}`; GenMove and
  Analyze never pick a move from NaN;
* `services/triton/policy_model.py`, inside a real Triton, refuses to send non-finite logits,
  or a non-finite value from a network that has a value head (the NaN value of a policy-only
  network still means "no value head"), with an error naming the model and version.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch

from services.api.movepred.v1 import search_pb2
from services.repository.publish import BACKEND_SOURCE
from services.search.client import SearchClient
from services.search.server import build_service
from services.triton.client import PolicyClient, TritonRequestError
from tests.triton_fixtures import (
    MODEL_NAME,
    TRACKED_REPOSITORY,
    TinyPolicy,
    random_boards,
    triton_server,  # noqa: F401 (pytest fixture)
)


# --------------------------------------------------------------------------- service side
@dataclass(frozen=True)
class Out:
    logits: np.ndarray
    values: np.ndarray | None
    model_name: str = "broken_policy"
    model_version: str = "8"


class BrokenEvaluator:
    """An in-process network answering NaN logits, or a NaN value next to finite ones, as a
    stock Triton (no policy_model.py in front of the network) would pass them on."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def infer(self, boards: np.ndarray) -> Out:
        n = len(boards)
        logits = np.zeros((n, 225), np.float32)
        values = np.zeros(n, np.float32)
        if self.kind == "nan-logits":
            logits[:] = np.nan
        elif self.kind == "inf-logit":
            logits[:, 112] = np.inf
        elif self.kind == "nan-value":  # a value head gone wrong on one board of the answer
            values[-1] = np.nan
            if n == 1:
                values[0] = np.inf
        return Out(logits, values)


@pytest.mark.parametrize("kind", ["nan-logits", "inf-logit", "nan-value"])
def test_service_fails_non_finite_answers_with_internal(kind: str) -> None:
    service = build_service(BrokenEvaluator(kind), port=0).start()
    target = f"127.0.0.1:{service.port}"
    try:
        with SearchClient(target) as client:
            calls = {
                "Predict": lambda: client.predict(["h8", "h9"], timeout=10),
                "Predict batch": lambda: client.predict_many(
                    [["h8"], ["h8", "h9"], []], timeout=10),
                "GenMove": lambda: client.genmove(["h8", "h9"], max_visits=64, timeout=10),
                "Analyze": lambda: list(client.analyze(["h8"], max_visits=64, timeout=10)),
            }
            for name, call in calls.items():
                with pytest.raises(grpc.RpcError) as info:
                    call()
                assert info.value.code() == grpc.StatusCode.INTERNAL, (name, info.value)
                details = info.value.details()
                assert "model broken_policy version 8" in details, (name, details)
                assert "non-finite" in details, (name, details)
        counted = service.metrics.value("movepred_nonfinite_outputs_total",
                                        model="broken_policy")
        assert counted == len(calls)
    finally:
        service.stop()


def test_all_nan_values_still_mean_no_value_head() -> None:
    """policy_model.py's convention: a policy-only network answers NaN for every board."""

    class NoValueHead(BrokenEvaluator):
        def infer(self, boards: np.ndarray) -> Out:
            out = super().infer(boards)
            return Out(out.logits, np.full(len(boards), np.nan, np.float32))

    service = build_service(NoValueHead("fine"), port=0).start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            r = client.predict(["h8"], timeout=10)
            assert not r.HasField("value") and len(r.top_moves) == 5
            g = client.genmove(["h8"], max_visits=32, timeout=10)
            assert g.total_visits == 32
        assert service.metrics.value("movepred_nonfinite_outputs_total",
                                     model="broken_policy") == 0
    finally:
        service.stop()


# --------------------------------------------------------------------------- inside Triton
class Wrapped(torch.nn.Module):
    """`TinyPolicy`'s logits, changed by the subclass (TorchScript has no super())."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = TinyPolicy()


class NaNLogits(Wrapped):
    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        return self.inner(boards) * float("nan")


class NaNValueWhereBlack(Wrapped):
    """A network with a value head whose value is NaN for boards holding a black stone."""

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.inner(boards)
        black = (boards == 1).flatten(1).sum(dim=1).float()
        value = torch.where(black > 0, torch.full_like(black, float("nan")), black * 0.0)
        return logits, value


class FiniteValue(Wrapped):
    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.inner(boards)
        return logits, torch.tanh(logits.mean(dim=1))


def load_from_bytes(client: PolicyClient, module: torch.nn.Module, tmp: Path,
                    version: int) -> None:
    """Load `module` as version `version` of the Gomoku model from bytes (no repository
    folder, no publisher checks): exactly the files a published version holds."""
    from services.triton.rollout import config_json, read_model_config

    torch.manual_seed(0)
    path = tmp / f"{type(module).__name__}.pt"
    torch.jit.script(module.eval()).save(str(path))
    config = config_json(read_model_config(TRACKED_REPOSITORY, MODEL_NAME), [version])
    assert json.loads(config)["name"] == MODEL_NAME
    client.load_model(MODEL_NAME, config=config, files={
        f"file:{version}/model.pt": path.read_bytes(),
        f"file:{version}/model.py": BACKEND_SOURCE.read_bytes(),
    })


@pytest.fixture(scope="module")
def triton_client(triton_server) -> Iterator[PolicyClient]:  # noqa: F811 (the fixture)
    with PolicyClient(triton_server.server.grpc_url, timeout_s=30.0) as client:
        yield client


@pytest.mark.timeout(300)
def test_policy_model_refuses_nan_logits_naming_model_and_version(
    triton_client: PolicyClient, tmp_path: Path
) -> None:
    load_from_bytes(triton_client, NaNLogits(), tmp_path, version=5)
    with pytest.raises(TritonRequestError) as info:
        triton_client.infer(random_boards(3))
    message = str(info.value)
    assert "model gomoku_policy version 5 returned non-finite outputs" in message
    assert "NaN/Inf logits for 3 of 3 boards" in message

    # the search service passes the refusal on as INTERNAL and counts it
    service = build_service(triton_client, port=0).start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client, \
                pytest.raises(grpc.RpcError) as rpc:
            client.genmove(["h8"], max_visits=32, timeout=20)
        assert rpc.value.code() == grpc.StatusCode.INTERNAL
        assert "gomoku_policy version 5" in rpc.value.details()
        assert service.metrics.value("movepred_nonfinite_outputs_total",
                                     model="gomoku_policy") == 1
    finally:
        service.stop()


@pytest.mark.timeout(300)
def test_policy_model_refuses_a_nan_value_from_a_value_head(
    triton_client: PolicyClient, tmp_path: Path
) -> None:
    load_from_bytes(triton_client, NaNValueWhereBlack(), tmp_path, version=6)
    empty = np.zeros((1, 15, 15), np.int8)
    ok = triton_client.infer(empty)  # no black stone: the value is a finite 0
    assert ok.values is not None and ok.values.tolist() == [0.0]
    one_black = empty.copy()
    one_black[0, 7, 7] = 1
    # one board: an all-NaN answer the service alone could not tell from "no value head"
    with pytest.raises(TritonRequestError) as info:
        triton_client.infer(one_black)
    assert "model gomoku_policy version 6 returned non-finite outputs" in str(info.value)
    assert "NaN/Inf value for 1 of 1 boards" in str(info.value)


@pytest.mark.timeout(300)
def test_finite_and_policy_only_models_still_answer(
    triton_client: PolicyClient, tmp_path: Path
) -> None:
    load_from_bytes(triton_client, FiniteValue(), tmp_path, version=7)
    out = triton_client.infer(random_boards(4))
    assert out.model_version == "7" and np.isfinite(out.values).all()
    load_from_bytes(triton_client, TinyPolicy(), tmp_path, version=8)
    out = triton_client.infer(random_boards(4))
    assert out.model_version == "8" and np.isnan(out.values).all()  # "no value head"
    service = build_service(triton_client, port=0).start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            r = client.predict(["h8"], timeout=20)
        assert r.model_version == "8" and not r.HasField("value")
        assert r.to_move == search_pb2.COLOR_WHITE
    finally:
        service.stop()
