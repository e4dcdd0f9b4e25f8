"""docs/api.md is what scripts/api_reference.py writes from the proto and the error table now,
and it shows every method, field and enum value of the API and every error code."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from services.api import errors
from services.api.movepred.v1 import search_pb2

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_reference",
                                                  ROOT / "scripts" / "api_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_api_reference_is_current() -> None:
    assert DOC.read_text() == _generator().render(), \
        "docs/api.md is stale: run .venv/bin/python scripts/api_reference.py"


def test_the_reference_shows_every_part_of_the_api() -> None:
    text = DOC.read_text()
    file = search_pb2.DESCRIPTOR
    for method in file.services_by_name["SearchService"].methods:
        assert f"| `{method.name}` |" in text, method.name
    for message in file.message_types_by_name.values():
        assert f"\n### {message.name}\n" in text, message.name
        section = text.split(f"\n### {message.name}\n", 1)[1].split("\n### ", 1)[0]
        for field in message.fields:
            assert f"| `{field.name}` | {field.number} |" in section, (message.name, field.name)
    for enum in file.enum_types_by_name.values():
        section = text.split(f"\n### {enum.name}\n", 1)[1].split("\n### ", 1)[0]
        for value in enum.values:
            assert f"| `{value.name}` | {value.number} |" in section, value.name
    for row in errors.ERROR_CODES:
        assert f"| `{row.code}` |" in text, row.code


def test_check_mode_finds_a_stale_page(tmp_path: Path, monkeypatch) -> None:
    generator = _generator()
    stale = tmp_path / "api.md"
    stale.write_text(DOC.read_text().replace("GAME_GOMOKU", "GOMOKU"))
    monkeypatch.setattr(generator, "DOC", stale)
    monkeypatch.setattr(generator, "ROOT", tmp_path)
    assert generator.main(["--check"]) == 1
    assert generator.main([]) == 0  # rewrites it
    assert generator.main(["--check"]) == 0
    assert stale.read_text() == DOC.read_text()
