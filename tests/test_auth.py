"""TLS, mutual TLS and the bearer token of the search service, server and clients.

A throwaway CA, server and client certificates are generated per module
(`services.search.auth.generate_pki`, with `cryptography`). The service runs in this process
with a local evaluator (every point equally likely): what is checked here is who gets through,
not what the network answers.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services import cli
from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.protocols import gomocup, gtp
from services.search import auth
from services.search import server as search_server
from services.search.client import SearchClient
from services.search.server import SERVICE_NAME, build_service
from tests.evaluators import UniformEvaluator

TOKEN = "correct-horse-battery-staple"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> auth.Pki:
    return auth.generate_pki(tmp_path_factory.mktemp("pki"), ("localhost", "127.0.0.1"))


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture(scope="module")
def tls_service(pki: auth.Pki) -> Iterator[search_server.Service]:
    """TLS and a token on 127.0.0.1, and the plaintext health-only port."""
    service = build_service(UniformEvaluator(), tls=auth.ServerTLS(pki.server_cert,
                                                                   pki.server_key),
                            token=TOKEN, health_port=0).start()
    yield service
    service.stop()


@pytest.fixture(scope="module")
def mtls_service(pki: auth.Pki) -> Iterator[search_server.Service]:
    """Mutual TLS: clients must present a certificate signed by the test CA."""
    service = build_service(UniformEvaluator(), tls=auth.ServerTLS(pki.server_cert,
                                                                   pki.server_key, pki.ca_cert),
                            token=TOKEN).start()
    yield service
    service.stop()


def code_of(call: Callable[[], Any]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        result = call()
        if hasattr(result, "__iter__") and not hasattr(result, "top_moves"):
            list(result)
    return info.value.code()


# ---------------------------------------------------------------------------- TLS + token
def test_tls_with_the_right_token_answers(tls_service, pki: auth.Pki) -> None:
    target = f"127.0.0.1:{tls_service.port}"
    with SearchClient(target, tls_ca=pki.ca_cert, token=TOKEN) as client:
        r = client.predict(["h8"], top_k=3)
        assert len(r.top_moves) == 3 and r.model_name == "uniform"
        reports = list(client.analyze(["h8"], max_visits=20))  # a streaming call too
        assert reports[-1].final
    # by name: the certificate carries localhost too
    with SearchClient(f"localhost:{tls_service.port}", tls_ca=pki.ca_cert, token=TOKEN) as c:
        assert c.predict(["h8"], top_k=1).top_moves


def test_missing_or_wrong_token_is_unauthenticated(tls_service, pki: auth.Pki) -> None:
    target = f"127.0.0.1:{tls_service.port}"
    with SearchClient(target, tls_ca=pki.ca_cert) as client:
        assert code_of(lambda: client.predict(["h8"])) == grpc.StatusCode.UNAUTHENTICATED
        assert code_of(lambda: client.genmove(["h8"], max_visits=8)) == \
            grpc.StatusCode.UNAUTHENTICATED
        assert code_of(lambda: client.analyze(["h8"], max_visits=8)) == \
            grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as info:
            client.predict(["h8"])
        assert "bearer token" in info.value.details()
        # health stays open: probes send no token
        assert client.health("") == "SERVING"
        assert client.health(SERVICE_NAME) in ("SERVING", "NOT_SERVING")
    for wrong in ("nope", TOKEN + "x", TOKEN[:-1]):
        with SearchClient(target, tls_ca=pki.ca_cert, token=wrong) as client:
            with pytest.raises(grpc.RpcError) as info:
                client.predict(["h8"])
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert info.value.details() == "invalid bearer token"
    # another scheme than Bearer is no token
    channel = auth.ClientAuth(tls=True, tls_ca=pki.ca_cert).channel(target)
    stub = search_pb2_grpc.SearchServiceStub(channel)
    request = search_pb2.PredictRequest(position=search_pb2.Position(board_size=15))
    with pytest.raises(grpc.RpcError) as info:
        stub.Predict(request, metadata=(("authorization", f"Basic {TOKEN}"),), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    channel.close()


def test_plaintext_client_cannot_talk_to_a_tls_server(tls_service) -> None:
    with SearchClient(f"127.0.0.1:{tls_service.port}", token=TOKEN) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.predict(["h8"], timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_server_certificate_from_another_ca_is_refused(tls_service, tmp_path: Path) -> None:
    other = auth.generate_pki(tmp_path / "other")
    with SearchClient(f"127.0.0.1:{tls_service.port}", tls_ca=other.ca_cert,
                      token=TOKEN) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.predict(["h8"], timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_health_port_is_plaintext_and_health_only(tls_service) -> None:
    assert tls_service.health_port and tls_service.health_port != tls_service.port
    with grpc.insecure_channel(f"127.0.0.1:{tls_service.health_port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        r = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert r.status == health_pb2.HealthCheckResponse.SERVING
        stub = search_pb2_grpc.SearchServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Predict(search_pb2.PredictRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


# ------------------------------------------------------------------------------ mutual TLS
def test_mtls_needs_a_client_certificate(mtls_service, pki: auth.Pki) -> None:
    target = f"127.0.0.1:{mtls_service.port}"
    with SearchClient(target, tls_ca=pki.ca_cert, token=TOKEN) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.predict(["h8"], timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    with SearchClient(target, tls_ca=pki.ca_cert, client_cert=pki.client_cert,
                      client_key=pki.client_key, token=TOKEN) as client:
        assert client.predict(["h8"], top_k=1).top_moves
    with SearchClient(target, tls_ca=pki.ca_cert, client_cert=pki.client_cert,
                      client_key=pki.client_key) as client:  # the token is still needed
        assert code_of(lambda: client.predict(["h8"])) == grpc.StatusCode.UNAUTHENTICATED


# ------------------------------------------------------------------- non-loopback exposure
def test_non_loopback_bind_needs_tls_and_a_token(pki: auth.Pki) -> None:
    tls = auth.ServerTLS(pki.server_cert, pki.server_key)
    for kwargs in ({}, {"tls": tls}, {"token": TOKEN}):
        with pytest.raises(auth.AuthConfigError, match=r"refusing to listen on 0\.0\.0\.0"):
            build_service(UniformEvaluator(), host="0.0.0.0", **kwargs)
    for kwargs in ({"insecure": True}, {"tls": tls, "token": TOKEN}):
        service = build_service(UniformEvaluator(), host="0.0.0.0", **kwargs)
        assert service.port > 0
        service.stop()
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        assert auth.is_loopback(host)
    for host in ("0.0.0.0", "::", "", "10.0.0.5", "search"):
        assert not auth.is_loopback(host)


def test_server_cli_refuses_non_loopback_without_tls_and_token(
    capsys: pytest.CaptureFixture[str], pki: auth.Pki, token_file: Path
) -> None:
    with pytest.raises(SystemExit) as info:
        search_server._parse_args(["--host", "0.0.0.0"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "refusing to listen on 0.0.0.0" in err and "--insecure" in err
    assert search_server._parse_args(["--host", "0.0.0.0", "--insecure"]).insecure
    args = search_server._parse_args(["--host", "0.0.0.0", "--tls-cert", str(pki.server_cert),
                                      "--tls-key", str(pki.server_key),
                                      "--token-file", str(token_file)])
    assert args.token == TOKEN and args.tls.cert == pki.server_cert
    with pytest.raises(SystemExit):
        search_server._parse_args(["--tls-cert", str(pki.server_cert)])  # no key
    assert "go together" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- tokens
def test_token_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t"
    path.write_text("  abc \nsecond line\n")
    assert auth.token_from(path, None) == "abc"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(auth.AuthConfigError, match="empty"):
        auth.token_from(tmp_path / "empty", None)
    with pytest.raises(auth.AuthConfigError, match="cannot read"):
        auth.token_from(tmp_path / "missing", None)
    monkeypatch.delenv("MY_TOKEN", raising=False)
    assert auth.token_from(None, "MY_TOKEN") is None  # the default variable may be unset
    with pytest.raises(auth.AuthConfigError, match="MY_TOKEN"):
        auth.token_from(None, "MY_TOKEN", env_required=True)
    monkeypatch.setenv("MY_TOKEN", "xyz")
    assert auth.token_from(None, "MY_TOKEN", env_required=True) == "xyz"
    written = auth.write_token(tmp_path / "new")
    assert auth.read_token_file(tmp_path / "new") == written and len(written) >= 40
    assert (tmp_path / "new").stat().st_mode & 0o077 == 0


def test_client_options_default_to_the_token_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    p = argparse.ArgumentParser()
    auth.add_client_arguments(p)
    monkeypatch.setenv(auth.DEFAULT_TOKEN_ENV, "from-env")
    a = auth.client_auth_from(p.parse_args([]))
    assert a.token == "from-env" and not a.tls
    monkeypatch.delenv(auth.DEFAULT_TOKEN_ENV)
    a = auth.client_auth_from(p.parse_args(["--tls-ca", "ca.pem"]))
    assert a.token is None and a.tls and a.tls_ca == Path("ca.pem")
    with pytest.raises(auth.AuthConfigError):
        auth.client_auth_from(p.parse_args(["--token-env", "UNSET_VARIABLE_X"]))


# ------------------------------------------------------------------------------ front-ends
def test_movepred_cli_sends_tls_and_token(tls_service, pki: auth.Pki, token_file: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(auth.DEFAULT_TOKEN_ENV, raising=False)
    target = ["--target", f"127.0.0.1:{tls_service.port}", "--tls-ca", str(pki.ca_cert)]
    assert cli.main(["predict", *target, "--token-file", str(token_file), "h8"]) == 0
    assert "uniform" in capsys.readouterr().out
    assert cli.main(["genmove", *target, "--token-file", str(token_file), "--visits", "16",
                     "h8"]) == 0
    capsys.readouterr()
    assert cli.main(["predict", *target, "h8"]) == cli.EXIT_RPC_ERROR
    assert "UNAUTHENTICATED" in capsys.readouterr().err
    monkeypatch.setenv(auth.DEFAULT_TOKEN_ENV, TOKEN)  # the default variable
    assert cli.main(["analyze", *target, "--visits", "16", "h8"]) == 0
    capsys.readouterr()
    out = pki.ca_cert.parent / "game.sgf"
    assert cli.main(["play", *target, "--visits", "4", "--max-moves", "2", "--quiet",
                     "--out", str(out)]) == 0
    assert out.is_file()
    capsys.readouterr()
    # the token file is checked before anything is sent
    assert cli.main(["predict", *target, "--token-file", "/nonexistent/token", "h8"]) == \
        cli.EXIT_USAGE
    assert "cannot read token file" in capsys.readouterr().err


def test_gtp_engine_sends_tls_and_token(tls_service, pki: auth.Pki, token_file: Path) -> None:
    p = argparse.ArgumentParser()
    gtp.add_arguments(p)
    args = p.parse_args(["--target", f"127.0.0.1:{tls_service.port}", "--tls-ca",
                         str(pki.ca_cert), "--token-file", str(token_file), "--visits", "8"])
    engine = gtp.engine_from(args)
    try:
        # the Gomoku-only test service answers Go with INVALID_ARGUMENT: past the token check
        answer = engine.handle("genmove b")
        assert "UNAUTHENTICATED" not in answer and "unavailable" not in answer, answer
        assert engine._client_or_new().auth.token == TOKEN
    finally:
        engine.close()
    args.token_file = None
    engine = gtp.engine_from(args)
    try:
        assert "UNAUTHENTICATED" in engine.handle("genmove b")
    finally:
        engine.close()


def test_gomocup_brain_sends_tls_and_token(tls_service, pki: auth.Pki, token_file: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(auth.DEFAULT_TOKEN_ENV, raising=False)
    base = ["--target", f"127.0.0.1:{tls_service.port}", "--tls-ca", str(pki.ca_cert),
            "--visits", "8"]
    out = io.StringIO()
    code = gomocup.main([*base, "--token-file", str(token_file)],
                        stdin=io.StringIO("START 15\nBEGIN\nEND\n"), stdout=out)
    lines = out.getvalue().splitlines()
    assert code == 0 and lines[0] == "OK"
    x, y = (int(v) for v in lines[1].split(","))
    assert 0 <= x < 15 and 0 <= y < 15
    out = io.StringIO()
    gomocup.main(base, stdin=io.StringIO("START 15\nBEGIN\nEND\n"), stdout=out)
    assert "UNAUTHENTICATED" in out.getvalue()
