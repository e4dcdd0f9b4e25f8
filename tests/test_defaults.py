"""services/defaults.py is the one source of shared addresses, file names and limits: the
files that cannot import it (the Makefile, compose, k8s, the Triton configs) state the same
values, and no module writes its own copy of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services import defaults

ROOT = Path(__file__).resolve().parents[1]
# Triton's python stub imports nothing of the project: its copy of the file name is the one
# allowed (a comment there says so).
OWN_COPIES_ALLOWED = {"services/triton/policy_model.py"}


def makefile_default(name: str) -> str:
    match = re.search(rf"^{name}\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert match, f"Makefile has no {name} ?= default"
    return match.group(1)


def test_the_makefile_uses_the_same_ports() -> None:
    assert int(makefile_default("SEARCH_PORT")) == defaults.SEARCH_PORT
    assert int(makefile_default("TRITON_GRPC_PORT")) == defaults.TRITON_GRPC_PORT


def test_compose_and_k8s_serve_on_the_same_ports() -> None:
    compose = (ROOT / "deploy" / "compose.yaml").read_text()
    assert f"--grpc-port={defaults.TRITON_GRPC_PORT}" in compose
    assert f'"{defaults.SEARCH_PORT}"' in compose
    search = (ROOT / "deploy" / "k8s" / "search-deployment.yaml").read_text()
    assert f"containerPort: {defaults.SEARCH_PORT}" in search
    triton = (ROOT / "deploy" / "k8s" / "triton-deployment.yaml").read_text()
    assert f"--grpc-port={defaults.TRITON_GRPC_PORT}" in triton


def test_every_served_config_batches_at_the_shared_limit() -> None:
    configs = [*(ROOT / "model_repository").glob("*/config.pbtxt"),
               *(ROOT / "deploy" / "triton-stock").glob("*/config.pbtxt")]
    assert configs
    for path in configs:
        limit = re.search(r"^max_batch_size:\s*(\d+)", path.read_text(), re.M)
        assert limit and int(limit.group(1)) == defaults.MAX_BATCH_BOARDS, path


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of a module, comments and docstring-only lines skipped roughly:
    a literal in a docstring's example command line is documentation, not a default."""
    out = []
    in_doc = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if stripped.count('"""') == 1:
            in_doc = not in_doc
            continue
        if in_doc or stripped.startswith("#") or stripped.startswith('"""'):
            continue
        out.append((n, line.split("#", 1)[0]))
    return out


@pytest.mark.parametrize("literal", [f'"{defaults.SEARCH_TARGET}"', f'"{defaults.TRITON_URL}"',
                                     f'"{defaults.MODEL_FILE}"'])
def test_no_module_keeps_its_own_copy(literal: str) -> None:
    copies = []
    for top in ("services", "flows", "scripts"):
        for path in sorted((ROOT / top).rglob("*.py")):
            shown = str(path.relative_to(ROOT))
            if shown == "services/defaults.py" or shown in OWN_COPIES_ALLOWED:
                continue
            copies += [f"{shown}:{n}" for n, code in _code_lines(path) if literal in code]
    assert copies == [], f"{literal} written outside services/defaults.py: {copies}"
