"""`python -m services.web` (`make web`): serve the web board on 127.0.0.1.

    python -m services.web --port 8080 --target 127.0.0.1:50051 [--token-file FILE]

The search service's security options are the CLI's (`services.search.auth`): --tls-ca /
--tls, --tls-client-cert / --tls-client-key, --token-file / --token-env ($MOVEPRED_TOKEN when
set). The token stays in this process: the page never sees it. Because the page can then use
the service as this process may, the board listens on loopback only unless --allow-remote.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import uvicorn

from services.defaults import SEARCH_TARGET
from services.search import auth
from services.search.client import search_client_factory
from services.settings import MAX_PORT, bounded
from services.web.app import create_app

DEFAULT_PORT = 8080


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.web", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=bounded(int, 1, MAX_PORT), default=DEFAULT_PORT,
                   help="port (%(default)s)")
    p.add_argument("--target", default=SEARCH_TARGET, help="search service host:port")
    p.add_argument("--allow-remote", action="store_true",
                   help="listen on a non-loopback --host (anyone who reaches it plays with "
                        "this process's token)")
    auth.add_client_arguments(p)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if not auth.is_loopback(args.host) and not args.allow_remote:
        print(f"error: refusing to listen on {args.host} (not loopback): the page uses the "
              "service with this process's token; pass --allow-remote if that is meant",
              file=sys.stderr)
        return 2
    try:
        make_client = search_client_factory(args)
    except auth.AuthConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    app = create_app(make_client(), target=args.target)
    print(f"web board on http://{args.host}:{args.port}/ (search service {args.target})",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
