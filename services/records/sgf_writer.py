"""SGF (FF[4]) text of one game, for every game the project writes records of.

`sgf_record` writes the root's properties and then one node per move, `MOVES_PER_LINE` nodes
a line and a commented node ending its line (so comments stay readable in a text editor).
Values are escaped here: `\\` and `]` always; root properties but GC are SimpleText, whose
line breaks become spaces (a name never spans lines). Point letters come from the game's
coordinates (`sgf_point` of services.protocols.sgf_export for Gomoku, `sgf_name` of
services.games.go for Go); the caller says which colour plays each move.
"""

from __future__ import annotations

from collections.abc import Sequence

APP_NAME = "movepred"
MOVES_PER_LINE = 10
_TEXT_PROPERTIES = frozenset({"GC", "C"})  # Text: line breaks kept; the others SimpleText


def app_version() -> str:
    """The installed package's version (AP[] of the records written), "dev" in a checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(APP_NAME)
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "dev"


def escape_text(value: str, simple: bool = False) -> str:
    r"""Escape `\` and `]`; SimpleText (names, results) also turns line breaks into spaces."""
    value = value.replace("\\", "\\\\").replace("]", "\\]")
    if simple:
        value = " ".join(value.split())
    return value


def sgf_record(root: Sequence[tuple[str, str]],
               moves: Sequence[tuple[str, str, str | None]]) -> str:
    """One game tree as SGF text (ends with a newline).

    `root`: (property, value) pairs in the order written, values unescaped. `moves`: per
    move, its colour ('B' or 'W'), its point as SGF letters ('' for a pass) and the comment
    of its node (None: no C[])."""
    lines = ["(;" + "".join(f"{key}[{escape_text(value, key not in _TEXT_PROPERTIES)}]"
                            for key, value in root)]
    line: list[str] = []
    for colour, point, comment in moves:
        node = f";{colour}[{point}]"
        if comment:
            node += f"C[{escape_text(comment)}]"
        line.append(node)
        if len(line) == MOVES_PER_LINE or comment:
            lines.append("".join(line))
            line = []
    if line:
        lines.append("".join(line))
    lines[-1] += ")"
    return "\n".join(lines) + "\n"
