"""Who may talk to the search service: TLS (optionally mutual) and a bearer token.

Server side: `ServerTLS.credentials()` for `grpc.Server.add_secure_port`, and
`BearerTokenInterceptor`, which answers every RPC without the header
``authorization: Bearer <token>`` (or with another token) with UNAUTHENTICATED, comparing in
constant time. The standard health service (grpc.health.v1) and server reflection stay open:
Kubernetes and compose probes send no token, and neither can change or read anything but the
service's status and its public API description.

Client side: `ClientAuth` holds what a client needs (CA to trust, optional client certificate
for mutual TLS, token) and makes the channel (`ClientAuth.channel`); `add_client_arguments` /
`client_auth_from` give every front-end (the `movepred` CLI, GTP engine, Gomocup brain) the same
options (`services.search.client.search_client_factory` makes their clients from them). The
token is sent as call metadata, so it also works over a plaintext channel on loopback (a
server binding a non-loopback address refuses to run without TLS and a token, unless
`--insecure`).

Tokens come from a file (`--token-file`, first line, whitespace stripped) or from an
environment variable (`--token-env VAR`, default `MOVEPRED_TOKEN`; an explicitly named variable
that is unset is an error, the default one unset means "no token").

For trying it out, `python -m services.search.auth certs --out DIR --host NAME` writes a
throwaway CA with a server and a client certificate, and `python -m services.search.auth token
--out FILE` a random token (mode 0600)::

    python -m services.search.auth certs --out tls --host localhost --host search
    python -m services.search.auth token --out tls/token
"""

from __future__ import annotations

import argparse
import datetime
import hmac
import ipaddress
import logging
import os
import secrets
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from services.grpc_options import RECONNECT_OPTIONS

logger = logging.getLogger(__name__)

DEFAULT_TOKEN_ENV = "MOVEPRED_TOKEN"
AUTH_METADATA_KEY = "authorization"
BEARER = "bearer"
# Services answered without a token: probes (health) and API discovery (reflection).
OPEN_SERVICES = frozenset(
    {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    }
)
LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback"})


class AuthConfigError(ValueError):
    """A TLS or token option cannot be used (missing file, empty token, unset variable...)."""


# ------------------------------------------------------------------------------------ tokens
def read_token_file(path: Path | str) -> str:
    """The token in `path`: its first line, stripped; an error for a missing or empty file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise AuthConfigError(f"cannot read token file {path}: {exc.strerror or exc}") from exc
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise AuthConfigError(f"token file {path} is empty")
    return token


def token_from(token_file: Path | str | None, token_env: str | None,
               *, env_required: bool = False) -> str | None:
    """The token from `token_file`, else from the variable `token_env`; None when neither
    gives one. `env_required`: the variable was named explicitly, so unset or empty is an
    error rather than "no token"."""
    if token_file:
        return read_token_file(token_file)
    if not token_env:
        return None
    value = os.environ.get(token_env, "").strip()
    if not value and env_required:
        raise AuthConfigError(f"environment variable {token_env} (--token-env) is unset or empty")
    return value or None


def _bearer_token(metadata: Sequence[tuple[str, Any]] | None) -> str | None:
    for key, value in metadata or ():
        if key.lower() == AUTH_METADATA_KEY:
            text = value.decode() if isinstance(value, bytes) else str(value)
            scheme, _, token = text.strip().partition(" ")
            return token.strip() if scheme.lower() == BEARER else None
    return None


def _service_of(method: str) -> str:
    """'/pkg.Service/Method' -> 'pkg.Service'."""
    return method.lstrip("/").split("/", 1)[0]


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Lets an RPC through only with ``authorization: Bearer <token>`` (services in
    `open_services` always); others get UNAUTHENTICATED before the servicer runs."""

    def __init__(self, token: str, open_services: frozenset[str] = OPEN_SERVICES) -> None:
        if not token:
            raise AuthConfigError("the bearer token is empty")
        self._token = token.encode()
        self._open_services = open_services

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        if _service_of(method) in self._open_services:
            return continuation(handler_call_details)
        token = _bearer_token(handler_call_details.invocation_metadata)
        # compare_digest takes time independent of where the strings differ
        if token is not None and hmac.compare_digest(token.encode(), self._token):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:  # unknown method: let gRPC say UNIMPLEMENTED
            return None
        message = ("missing bearer token (metadata 'authorization: Bearer <token>')"
                   if token is None else "invalid bearer token")
        return _denying_handler(handler, method, message)


def _denying_handler(handler: grpc.RpcMethodHandler, method: str,
                     message: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler` that answers UNAUTHENTICATED."""

    def deny(request: Any, context: grpc.ServicerContext) -> Any:
        logger.warning("rpc %s from %s: UNAUTHENTICATED: %s", method, context.peer(), message)
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    kinds = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    make = kinds[(bool(handler.request_streaming), bool(handler.response_streaming))]
    return make(deny, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


# -------------------------------------------------------------------------------------- TLS
def _read(path: Path | str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise AuthConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if b"-----BEGIN" not in data:
        raise AuthConfigError(f"{what} {path} is not PEM")
    return data


@dataclass(frozen=True)
class ServerTLS:
    """The server's certificate chain and key (PEM files); with `client_ca`, clients must
    present a certificate signed by it (mutual TLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        chain = _read(self.cert, "TLS certificate")
        key = _read(self.key, "TLS key")
        ca = _read(self.client_ca, "client CA") if self.client_ca else None
        return grpc.ssl_server_credentials(
            [(key, chain)], root_certificates=ca, require_client_auth=ca is not None
        )


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or name to bind) is reachable from this machine only."""
    host = host.strip("[]")
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name or the wildcard "" : assume it is reachable from outside


def check_exposure(host: str, tls: ServerTLS | None, token: str | None, insecure: bool) -> None:
    """Refuse to listen on a non-loopback address without TLS and a token, unless `insecure`:
    anyone who can reach the port could otherwise read the traffic or use the service."""
    if insecure or is_loopback(host) or (tls is not None and token):
        return
    missing = " and ".join(
        what for what, ok in (("TLS (--tls-cert/--tls-key)", tls is not None),
                              ("a token (--token-file or --token-env)", bool(token))) if not ok)
    raise AuthConfigError(
        f"refusing to listen on {host} (not loopback) without {missing}; "
        "give them, bind 127.0.0.1, or pass --insecure if the network is trusted"
    )


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """The server's TLS, token and --insecure options."""
    g = p.add_argument_group("security (TLS and bearer token)")
    g.add_argument("--tls-cert", type=Path, default=None,
                   help="PEM certificate chain of the server (with --tls-key: serve TLS)")
    g.add_argument("--tls-key", type=Path, default=None, help="PEM private key of the server")
    g.add_argument("--tls-client-ca", type=Path, default=None,
                   help="PEM CA: clients must present a certificate it signed (mutual TLS)")
    g.add_argument("--token-file", type=Path, default=None,
                   help="require 'authorization: Bearer <token>' with the token in this file")
    g.add_argument("--token-env", default=None, metavar="VAR",
                   help=f"... with the token in this environment variable (default: "
                        f"${DEFAULT_TOKEN_ENV} when it is set); health and reflection stay "
                        "open")
    g.add_argument("--insecure", action="store_true",
                   help="allow a non-loopback --host without TLS and a token")


def server_security_from(args: argparse.Namespace) -> tuple[ServerTLS | None, str | None]:
    """(TLS or None, token or None) from the options of `add_server_arguments`."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise AuthConfigError("--tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise AuthConfigError("--tls-client-ca needs --tls-cert and --tls-key")
    tls = (ServerTLS(args.tls_cert, args.tls_key, args.tls_client_ca)
           if args.tls_cert is not None else None)
    token = token_from(args.token_file, args.token_env or DEFAULT_TOKEN_ENV,
                       env_required=args.token_env is not None)
    return tls, token


# ----------------------------------------------------------------------------------- client
@dataclass(frozen=True)
class ClientAuth:
    """How a client reaches a protected service: trust `tls_ca` (None with `tls`: the system's
    roots), present `client_cert`/`client_key` (mutual TLS), send `token`."""

    tls: bool = False
    tls_ca: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    token: str | None = None
    server_name: str | None = None  # the name the server's certificate must carry

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return ((AUTH_METADATA_KEY, f"Bearer {self.token}"),) if self.token else ()

    def credentials(self) -> grpc.ChannelCredentials:
        if (self.client_cert is None) != (self.client_key is None):
            raise AuthConfigError("--tls-client-cert and --tls-client-key go together")
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.tls_ca, "TLS CA") if self.tls_ca else None,
            private_key=_read(self.client_key, "client key") if self.client_key else None,
            certificate_chain=(_read(self.client_cert, "client certificate")
                               if self.client_cert else None),
        )

    def channel(self, target: str,
                options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        """A channel to `target` with the platform's reconnect settings (and `options`)."""
        opts = [*RECONNECT_OPTIONS, *options]
        if not self.tls:
            return grpc.insecure_channel(target, options=opts)
        if self.server_name:
            opts.append(("grpc.ssl_target_name_override", self.server_name))
        return grpc.secure_channel(target, self.credentials(), options=opts)


def add_client_arguments(p: argparse.ArgumentParser) -> None:
    """The client's TLS and token options (the same in every front-end)."""
    g = p.add_argument_group("security (TLS and bearer token)")
    g.add_argument("--tls", action="store_true",
                   help="connect with TLS, trusting the system's CAs (implied by --tls-ca)")
    g.add_argument("--tls-ca", type=Path, default=None,
                   help="PEM CA that signed the server's certificate (connect with TLS)")
    g.add_argument("--tls-client-cert", type=Path, default=None,
                   help="PEM client certificate for mutual TLS")
    g.add_argument("--tls-client-key", type=Path, default=None, help="its PEM private key")
    g.add_argument("--tls-server-name", default=None,
                   help="name to expect in the server's certificate (default: the target's host)")
    g.add_argument("--token-file", type=Path, default=None,
                   help="send 'authorization: Bearer <token>' with the token in this file")
    g.add_argument("--token-env", default=None, metavar="VAR",
                   help=f"... with the token in this environment variable (default: "
                        f"${DEFAULT_TOKEN_ENV} when it is set)")
    g.add_argument("--wait-for-ready", action="store_true",
                   help="while the service is unreachable, wait (up to the timeout) instead of "
                        "failing at once")


def client_auth_from(args: argparse.Namespace) -> ClientAuth:
    """A `ClientAuth` from the options of `add_client_arguments`."""
    token = token_from(args.token_file, args.token_env or DEFAULT_TOKEN_ENV,
                       env_required=args.token_env is not None)
    tls = bool(args.tls or args.tls_ca or args.tls_client_cert or args.tls_client_key)
    return ClientAuth(tls=tls, tls_ca=args.tls_ca, client_cert=args.tls_client_cert,
                      client_key=args.tls_client_key, token=token,
                      server_name=args.tls_server_name)


# ------------------------------------------------------------------- throwaway certificates
@dataclass(frozen=True)
class Pki:
    """Paths of a throwaway CA and the server and client certificates it signed."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def generate_pki(out: Path | str, hosts: Sequence[str] = ("localhost", "127.0.0.1"),
                 days: int = 365) -> Pki:
    """A new CA (`ca.pem`, `ca.key`), a server certificate for `hosts` (DNS names or IP
    addresses; `server.pem`, `server.key`) and a client certificate (`client.pem`,
    `client.key`) in `out`. For tests and trials: keep `ca.key` away from the servers."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        path.chmod(0o600)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder().subject_name(name("movepred test CA"))
        .issuer_name(name("movepred test CA")).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, usage: Any, sans: list[x509.GeneralName]) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    server_cert, server_key = leaf(hosts[0] if hosts else "movepred",
                                   ExtendedKeyUsageOID.SERVER_AUTH, sans)
    client_cert, client_key = leaf("movepred client", ExtendedKeyUsageOID.CLIENT_AUTH, [])

    pki = Pki(out / "ca.pem", out / "ca.key", out / "server.pem", out / "server.key",
              out / "client.pem", out / "client.key")
    pem = serialization.Encoding.PEM
    pki.ca_cert.write_bytes(ca_cert.public_bytes(pem))
    write_key(ca_key, pki.ca_key)
    pki.server_cert.write_bytes(server_cert.public_bytes(pem))
    write_key(server_key, pki.server_key)
    pki.client_cert.write_bytes(client_cert.public_bytes(pem))
    write_key(client_key, pki.client_key)
    return pki


def write_token(path: Path | str) -> str:
    """A new random token (256 bits, URL-safe text) written to `path` with mode 0600."""
    path = Path(path)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def main(argv: Sequence[str] | None = None) -> int:
    from services import logs

    p = argparse.ArgumentParser(prog="python -m services.search.auth",
                                description="Throwaway certificates and tokens for trials.")
    logs.add_arguments(p)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("certs", help="a CA, a server and a client certificate")
    c.add_argument("--out", type=Path, required=True, help="folder to write the PEM files to")
    c.add_argument("--host", action="append", default=None,
                   help="name or address the server is reached by (repeatable; default "
                        "localhost and 127.0.0.1)")
    c.add_argument("--days", type=int, default=365)
    t = sub.add_parser("token", help="a random bearer token")
    t.add_argument("--out", type=Path, required=True, help="file to write it to (mode 0600)")
    args = p.parse_args(argv)
    logs.configure_from(args)
    if args.command == "certs":
        pki = generate_pki(args.out, args.host or ("localhost", "127.0.0.1"), args.days)
        logger.info("wrote %s, %s, %s (CA key: %s)", pki.ca_cert, pki.server_cert,
                    pki.client_cert, pki.ca_key)
    else:
        write_token(args.out)
        logger.info("wrote a new token to %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
