"""Logs an operator can read: one JSON line per failed request, with its facts as fields.

The search service logs every call that does not end OK once, through `logging`, with `rpc`,
`code`, `details`, `model`, `model_version` (where known) and `peer` as `extra` fields, so
`--log-format json` (services/logs.py) gives lines a log pipeline can filter on. Successful
calls log nothing.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest

from services import logs
from services.games.registry import BUILTIN_MODULES, registered_games
from services.search.client import SearchClient
from services.search.server import build_service
from services.triton.ports import free_port

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Out:
    logits: np.ndarray
    model_name: str = "test_policy"
    model_version: str = "3"


class Evaluator:
    """Uniform logits; NaN ones for boards holding a stone on a1 (a broken model)."""

    def infer(self, boards: np.ndarray) -> Out:
        logits = np.zeros((len(boards), 225), np.float32)
        logits[boards[:, 0, 0] != 0] = np.nan
        return Out(logits)


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The servicer's log records as JSON lines (the format of --log-format json)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    log = logging.getLogger("services.search.servicer")
    old_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_one_json_line_per_failed_request(json_log: io.StringIO) -> None:
    service = build_service(Evaluator(), port=0).start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            client.predict(["h8"], timeout=10)  # OK: no line
            assert lines(json_log) == []
            with pytest.raises(grpc.RpcError):
                client.predict(["h8", "h8"], timeout=10)  # INVALID_ARGUMENT
            with pytest.raises(grpc.RpcError):
                client.predict(["a1"], timeout=10)  # the model answers NaN: INTERNAL
            with pytest.raises(grpc.RpcError):
                client.genmove(["h8"], max_visits=100_001, timeout=10)  # over the limit
    finally:
        service.stop()
    got = lines(json_log)
    assert len(got) == 3, got
    invalid, broken, large = got
    for line in got:
        assert {"time", "level", "logger", "message", "rpc", "code", "details", "model",
                "model_version", "peer"} <= set(line), line
        assert line["peer"].startswith("ipv4:127.0.0.1:") or line["peer"].startswith("ipv6:")
        assert line["logger"] == "services.search.servicer"
    assert (invalid["rpc"], invalid["code"], invalid["level"]) == (
        "Predict", "INVALID_ARGUMENT", "INFO")
    assert invalid["details"] == "position.moves[1]: h8 is occupied"
    assert invalid["model_version"] == ""  # refused before any model was asked
    assert (broken["rpc"], broken["code"], broken["level"]) == ("Predict", "INTERNAL", "WARNING")
    assert (broken["model"], broken["model_version"]) == ("test_policy", "3")
    assert "non-finite logits" in broken["details"]
    assert broken["message"].startswith("Predict failed: INTERNAL: ")
    assert (large["rpc"], large["code"], large["level"]) == (
        "GenMove", "INVALID_ARGUMENT", "INFO")
    assert large["details"].startswith("max_visits: must be at most")


def test_server_cli_logs_json_start_up_check_and_shutdown(tmp_path: Path) -> None:
    """`--log-format json`: the start-up line, the start-up check of the models (Triton is not
    there: a warning saying what to run) and the shutdown lines, each one JSON object."""
    # by default the service serves every built-in game (a test game registered in this
    # process is not one: the server subprocess never imports it)
    served = {g.name for g in registered_games() if type(g).__module__ in BUILTIN_MODULES}
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.search.server", "--port", str(port), "--triton-url",
         f"127.0.0.1:{free_port()}", "--log-format", "json"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        seen: list[dict] = []
        assert proc.stdout is not None
        for raw in proc.stdout:
            seen.append(json.loads(raw))
            if sum("start-up check" in s["message"] for s in seen) == len(served):
                break
        proc.terminate()
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    seen += [json.loads(raw) for raw in rest.splitlines()]
    assert proc.returncode == 0
    messages = [s["message"] for s in seen]
    assert any(m.startswith(f"movepred search service listening on 127.0.0.1:{port}")
               for m in messages), messages
    # every served game's rules are warmed up (compiled kernels) before the service listens
    listening = next(i for i, m in enumerate(messages) if m.startswith("movepred search"))
    assert {s["game"] for s in seen[:listening] if s["message"].startswith("rules of ")} == served
    checks = [s for s in seen if "start-up check" in s["message"]]
    assert {c["game"] for c in checks} == served
    assert all(c["level"] == "WARNING" and "unreachable" in c["reason"] for c in checks)
    assert any(m.startswith("stopping") for m in messages)
    assert messages[-1].startswith("stopped after")
