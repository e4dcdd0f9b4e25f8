"""What the text-protocol front-ends (GTP for Go, Gomocup for Gomoku) share: one search client,
made on first use, and the loop that answers stdin on stdout."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, TextIO


class SearchClientOwner:
    """Holds the search-service client of a front-end: `client_factory()` makes it on first
    use (a `SearchClient` for `target` without a factory), `close()` lets it go."""

    def __init__(self, target: str, client_factory: Callable[[], Any] | None = None) -> None:
        self.target = target
        self._client_factory = client_factory
        self._client: Any = None

    def _client_or_new(self) -> Any:
        if self._client is None:
            if self._client_factory is not None:
                self._client = self._client_factory()
            else:
                from services.search.client import SearchClient

                self._client = SearchClient(self.target)
        return self._client

    def close(self) -> None:
        if self._client is not None and hasattr(self._client, "close"):
            self._client.close()
        self._client = None


class LineEngine(Protocol):
    finished: bool

    def close(self) -> None: ...


def serve_lines(engine: LineEngine, stdin: TextIO, stdout: TextIO,
                answers: Callable[[str], Iterable[str]]) -> int:
    """Feed `engine` one line at a time until it is finished or the input ends, writing each
    text `answers(line)` gives and flushing at once (the other side waits for it); close the
    engine however the loop ends."""
    try:
        while not engine.finished:
            line = stdin.readline()
            if not line:
                break
            for text in answers(line):
                stdout.write(text)
                stdout.flush()
    finally:
        engine.close()
    return 0
