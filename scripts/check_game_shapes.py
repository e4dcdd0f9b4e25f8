"""Refuse code that tells games apart by a tensor's rank (`make lint`).

A game is an object asked for its shapes (`Game.input_shape`, `input_planes`, `has_pass`,
`model_io()`); code that decides "a 4-D batch is Go" or "a board with planes has a pass" breaks
the day a game with planes and no pass, or a board and a pass, is registered. This check finds
the rank tests such code is written with: a comparison of `x.ndim`, `x.dim()` or
`len(x.shape)` with the literal 3 or 4 (the rank of a batch of boards, [N, S, S], or of planes,
[N, C, S, S]). A comparison with a computed rank (`1 + len(io.board_shape)`) is what a check
against the game's declared shape looks like and passes.

A rank test that is about a layout and not a game (boards given as [B, S, S] or flat
[B, S * S], say) says so on its line with a comment starting `# layout:`.

    .venv/bin/python scripts/check_game_shapes.py [PATH ...]   (default: services flows)

Exit status 1 and one line per finding (path:line: the code) when any is found.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = ("services", "flows")
BOARD_RANKS = {3, 4}
ALLOW_MARK = "# layout:"
GENERATED = ("services/api/movepred",)  # protoc's output


def _is_rank(node: ast.expr) -> bool:
    """`x.ndim`, `x.dim()` or `len(x.shape)` (also `len(shape)` of a name called shape)."""
    if isinstance(node, ast.Attribute) and node.attr == "ndim":
        return True
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "dim" and not node.args:
            return True
        if isinstance(func, ast.Name) and func.id == "len" and len(node.args) == 1:
            arg = node.args[0]
            return (isinstance(arg, ast.Attribute) and arg.attr == "shape") or (
                isinstance(arg, ast.Name) and arg.id.endswith("shape"))
    return False


def _is_board_rank(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and \
        node.value in BOARD_RANKS


def findings(source: str) -> Iterator[int]:
    """Line numbers of rank tests against 3 or 4 in `source` (lines marked `# layout:` are
    skipped)."""
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for a, b in pairwise(operands):
            if (_is_rank(a) and _is_board_rank(b)) or (_is_rank(b) and _is_board_rank(a)):
                if ALLOW_MARK not in lines[node.lineno - 1]:
                    yield node.lineno
                break


def check(paths: list[Path]) -> list[str]:
    out = []
    for top in paths:
        files = [top] if top.is_file() else sorted(top.rglob("*.py"))
        for path in files:
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            if str(shown).startswith(GENERATED):
                continue
            source = path.read_text(encoding="utf-8")
            lines = source.splitlines()
            out += [f"{shown}:{n}: {lines[n - 1].strip()}" for n in findings(source)]
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(p).resolve() for p in args] or [ROOT / p for p in DEFAULT_PATHS]
    found = check(paths)
    for line in found:
        print(f"{line}\n    a game told apart by a tensor's rank: ask the Game "
              f"(input_shape, input_planes, has_pass) or mark a layout test '{ALLOW_MARK} ...'")
    return int(bool(found))


if __name__ == "__main__":
    sys.exit(main())
