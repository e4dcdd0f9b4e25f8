"""services.logs: the handler an entry point installs follows stderr as it is now."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from services import logs


@pytest.fixture()
def root_handlers():
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in before:
            root.removeHandler(handler)
    root.setLevel(level)


def test_records_go_to_the_current_stderr_and_a_closed_one_breaks_nothing(
        root_handlers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logs.configure("json", "INFO")
    logging.getLogger("movepred.test").info("one", extra={"rpc": "Predict"})
    assert json.loads(first.getvalue())["rpc"] == "Predict"
    first.close()  # e.g. a test's capture stream, gone after the test
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    errors: list[BaseException] = []
    monkeypatch.setattr(logging.Handler, "handleError", lambda self, record: errors.append(
        sys.exc_info()[1]))
    logging.getLogger("movepred.test").info("two")
    assert not errors  # the handler bound to the closed stream failed here before
    assert json.loads(second.getvalue())["message"] == "two"


def test_configure_twice_keeps_one_handler(root_handlers: None) -> None:
    logs.configure("text", "INFO")
    logs.configure("json", "INFO")
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_movepred", False)]
    assert len(ours) == 1 and isinstance(ours[0].formatter, logs.JsonFormatter)
