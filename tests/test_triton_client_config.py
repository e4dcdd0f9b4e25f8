"""The Triton client's read of a model's config (its input encoder): a first call that the
connection's set-up makes miss its timeout is tried once more before UNAVAILABLE."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tritonclient.utils import InferenceServerException

from services.triton.client import PolicyClient, TritonRequestError, TritonUnavailableError


class FlakyConfigs:
    """`get_model_config` answers after `failures` calls raised `status`."""

    def __init__(self, failures: int, status: str = "StatusCode.UNAVAILABLE") -> None:
        self.failures = failures
        self.status = status
        self.calls = 0

    def get_model_config(self, name: str, client_timeout: float | None = None):
        self.calls += 1
        if self.calls <= self.failures:
            raise InferenceServerException(
                "connection attempt timed out before receiving SETTINGS frame",
                status=self.status)
        return SimpleNamespace(config=SimpleNamespace(parameters={}))


def _client(monkeypatch, fake: FlakyConfigs) -> PolicyClient:
    client = PolicyClient("127.0.0.1:1", "gomoku_policy", timeout_s=0.1)
    monkeypatch.setattr(client, "_grpc", lambda: fake)
    return client


def test_a_slow_first_connection_is_tried_once_more(monkeypatch):
    fake = FlakyConfigs(failures=1)
    assert _client(monkeypatch, fake).encoder_of() == "basic" and fake.calls == 2


def test_triton_down_is_unavailable_after_the_second_try(monkeypatch):
    fake = FlakyConfigs(failures=5)
    with pytest.raises(TritonUnavailableError, match="config of gomoku_policy"):
        _client(monkeypatch, fake).encoder_of()
    assert fake.calls == 2


def test_a_refusal_is_not_tried_again(monkeypatch):
    fake = FlakyConfigs(failures=5, status="StatusCode.INVALID_ARGUMENT")
    with pytest.raises(TritonRequestError):
        _client(monkeypatch, fake).encoder_of()
    assert fake.calls == 1
