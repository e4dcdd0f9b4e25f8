"""One logging set-up for every entry point (servers, flows, CLIs): plain text or JSON lines.

Library modules only do ``log = logging.getLogger(__name__)`` and log; the entry point calls
`configure` once (``--log-format text|json``, ``--log-level``). JSON lines carry the record's
``extra`` fields (``rpc``, ``code``, ``model_version``, ``peer``...), so an operator's log
pipeline can filter on them without parsing messages.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# LogRecord attributes that are not `extra` fields.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the extra fields, the error."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, (str, int, float, bool, type(None))) \
                    else str(value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time of each record, not the stream it was
    when the entry point configured logging: a caller that swaps stderr and closes its stand-in
    (a test capturing output, a daemon redirecting it) must not leave a handler bound to a
    closed file, which would fail every later record of every thread."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass  # always the current stderr


def configure(fmt: str = "text", level: str | int = "INFO", stream: TextIO | None = None) -> None:
    """Route the root logger to `stream` (default: the current stderr, looked up for every
    record) in `fmt` ("text" or "json"); idempotent."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    handler = logging.StreamHandler(stream) if stream is not None else _CurrentStderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_movepred", False):
            root.removeHandler(old)
    handler._movepred = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-format`` and ``--log-level`` for an entry point's parser."""
    parser.add_argument("--log-format", choices=FORMATS, default="text",
                        help="log lines as plain text (default) or one JSON object per line")
    parser.add_argument("--log-level", default="INFO",
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="default INFO")


def configure_from(args: argparse.Namespace) -> None:
    """`configure` from the options `add_arguments` added."""
    configure(args.log_format, args.log_level)
