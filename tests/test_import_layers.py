"""`make lint`'s two structural checks: the import layers of pyproject.toml (import-linter) and
no game told apart by a tensor's rank (scripts/check_game_shapes.py). Each is shown to pass on
the tree and to fail on the defect it exists for, planted in a copy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
sys.path.insert(0, str(ROOT / "scripts"))

import check_game_shapes  # noqa: E402


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    """lint-imports on `tree` (a checkout or a copy of its services/, flows/, pyproject)."""
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=tree,
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(tree)})


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory) -> Path:
    """The import-relevant part of the checkout: services/, flows/ and pyproject.toml."""
    out = tmp_path_factory.mktemp("tree")
    for name in ("services", "flows"):
        shutil.copytree(ROOT / name, out / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", out)
    return out


def test_the_tree_keeps_its_import_layers() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_a_new_import_cycle_breaks_the_contracts(tree_copy: Path) -> None:
    """A record codec importing a front-end: both a layer broken and a cycle made."""
    codec = tree_copy / "services" / "records" / "reasons.py"
    original = codec.read_text()
    codec.write_text(original + "\nfrom services.cli import main as _main  # noqa\n")
    try:
        result = lint_imports(tree_copy)
    finally:
        codec.write_text(original)
    assert result.returncode != 0
    assert "services.records is not allowed to import services.cli" in result.stdout
    assert "No cycles are allowed in services." in result.stdout


def test_a_cycle_inside_one_package_breaks_the_contracts(tree_copy: Path) -> None:
    """Two modules of one package importing each other (no layer is crossed): the registry
    imports the Game interface, which is made to import the registry back."""
    low = tree_copy / "services" / "games" / "base.py"
    original = low.read_text()
    low.write_text(original + "\nfrom services.games import registry as _registry  # noqa\n")
    try:
        result = lint_imports(tree_copy)
    finally:
        low.write_text(original)
    assert result.returncode != 0
    assert "No cycles are allowed in services.games." in result.stdout


GUESSES = {
    "stones = boards[:, 0] if boards.ndim == 4 else boards": 1,
    "n = s * s + (1 if len(shape) >= 3 else 0)": 1,
    "if x.dim() == 3:\n    pass": 1,
    "ok = 3 != boards.ndim": 1,
    "if logits.ndim != 2:\n    raise ValueError": 0,  # not a board's rank
    "ok = arr.ndim == 1 + len(io.board_shape)": 0,  # against the game's declared shape
    "if cells.ndim == 3:  # layout: [B, S, S] or [B, S * S]\n    pass": 0,
}


@pytest.mark.parametrize("source", GUESSES)
def test_the_shape_check_finds_rank_tests_against_a_board_rank(source: str) -> None:
    assert len(list(check_game_shapes.findings(source))) == GUESSES[source]


def test_no_game_is_told_apart_by_a_rank_in_the_tree() -> None:
    found = check_game_shapes.check([ROOT / "services", ROOT / "flows"])
    assert found == []


def test_the_shape_check_fails_on_a_planted_guess(tmp_path: Path) -> None:
    planted = tmp_path / "guess.py"
    planted.write_text("def n_moves(boards):\n    return 226 if boards.ndim == 4 else 225\n")
    assert check_game_shapes.main([str(planted)]) == 1
    assert check_game_shapes.main([str(ROOT / "services" / "defaults.py")]) == 0
