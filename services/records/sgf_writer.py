"""SGF (FF[4]) text of one game, for every game the project writes records of.

`sgf_record` writes the root's properties and then one node per move, `MOVES_PER_LINE` nodes
a line and a commented node ending its line (so comments stay readable in a text editor).
Values are escaped here: `\\` and `]` always; root properties but GC are SimpleText, whose
line breaks become spaces (a name never spans lines). The caller says which colour plays each
move and gives its point as SGF letters (`sgf_point` here, `services.coords.sgf_name`).

On top of it, the records of the two games with their own SGF game type:

* `game_to_sgf`: Gomoku/Renju, GM[4]: SZ, RU (our rule name: freestyle, standard or renju;
  SGF defines no RU values for GM[4]), PB/PW, DT, EV, RE, GC, then one node per move, black
  first. Results follow the SGF convention: "B+" / "W+" (a winner; Gomoku has no score), "0"
  (a draw, the board filled up), "?" (unknown, e.g. the move limit ended a self-play game),
  or None for no RE at all.
* `go_sgf`: Go, GM[1]: SZ, KM, RU[Chinese] (the area scoring the GTP front-end plays), one
  node per move, a pass as B[] / W[].

Points are repository points `y * size + x` (y from the *bottom*); SGF letters give the
column from the left and the row from the *top* (`services.coords`), so the centre h8 of 15x15
is `hh` and a1 is `ao`.

A codec: it imports no game. The few values it shares with the games (the Gomoku rule names,
the default Go board and komi, the colours of `services.records.sgf`) are written here, and
tests/test_sgf_writer.py checks that they agree with the games'.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from services import coords
from services.records.sgf import BLACK

APP_NAME = "movepred"
MOVES_PER_LINE = 10
_TEXT_PROPERTIES = frozenset({"GC", "C"})  # Text: line breaks kept; the others SimpleText

GOMOKU_GM = 4
GOMOKU_SIZE = 15  # a Gomoku record's board unless told (services.games.gomoku.rules.DEFAULT_SIZE)
GOMOKU_RULES = ("freestyle", "standard", "renju")  # RU of GM[4]: services.games.gomoku.rules.Rule
GO_SIZE = 19  # a Go record's board unless told (services.games.go.game.GO_SIZE)
GO_KOMI = 7.5  # and its komi (services.games.go.game.DEFAULT_KOMI)

Move = tuple[int, int | None]  # a Go move: (colour, point or None for a pass)


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


# ---- points ----------------------------------------------------------------------------------
def sgf_point(point: int, size: int = GOMOKU_SIZE) -> str:
    """Repository point (y from the bottom) -> SGF letters (column, row from the top);
    ValueError for a point off the board. `services.coords.sgf_name` checked, for writers
    (`services.coords.sgf_point` goes the other way, from letters to a point)."""
    if not 0 <= point < size * size:
        raise ValueError(f"point {point} is off the {size}x{size} board")
    return coords.sgf_name(point, size)


def parse_sgf_point(value: str, size: int = GOMOKU_SIZE) -> int:
    """The inverse of `sgf_point`."""
    letters = coords.SGF_LETTERS[:size]
    if len(value) != 2 or any(c not in letters for c in value):
        raise ValueError(f"not a point on a {size}x{size} board: {value!r}")
    return coords.sgf_point(letters.index(value[0]), letters.index(value[1]), size)


# ---- Gomoku ----------------------------------------------------------------------------------
def game_to_sgf(
    moves: Sequence[int],
    size: int = GOMOKU_SIZE,
    rule: str = GOMOKU_RULES[0],
    black: str = APP_NAME,
    white: str = APP_NAME,
    result: str | None = None,
    comments: Mapping[int, str] | None = None,
    *,
    date: dt.date | str | None = None,
    game_comment: str | None = None,
    event: str | None = None,
) -> str:
    """One Gomoku game as SGF text (ends with a newline).

    `moves` are points `y * size + x`, black first, alternating. `rule` is a name of
    `GOMOKU_RULES` (any case; a `services.games.gomoku.rules.Rule` is one). `comments` maps a move's
    index in `moves` (0 = the first move) to the C[] of that move's node. `date` defaults to
    today (DT is YYYY-MM-DD). Raises ValueError for a point off the board or played twice, an
    unknown rule, or a comment for a move that is not in `moves`; game rules (fives, renju)
    are not checked.
    """
    if not 1 <= size <= len(coords.SGF_LETTERS):
        raise ValueError(f"board size {size} cannot be written as SGF")
    seen: set[int] = set()
    for i, p in enumerate(moves):
        if not 0 <= p < size * size:
            raise ValueError(f"moves[{i}]: point {p} is off the {size}x{size} board")
        if p in seen:
            raise ValueError(f"moves[{i}]: point {sgf_point(p, size)} is already occupied")
        seen.add(p)
    comments = dict(comments or {})
    bad = sorted(k for k in comments if not 0 <= k < len(moves))
    if bad:
        raise ValueError(f"comments for moves {bad} which are not in the game")
    rule_name = str(rule).lower()
    if rule_name not in GOMOKU_RULES:
        raise ValueError(f"{rule!r} is not a Gomoku rule ({', '.join(GOMOKU_RULES)})")
    if date is None:
        date = dt.date.today()
    date_text = date.isoformat() if isinstance(date, dt.date) else str(date)

    root = [("FF", "4"), ("GM", str(GOMOKU_GM)), ("CA", "UTF-8"),
            ("AP", f"{APP_NAME}:{app_version()}"), ("SZ", str(size)), ("RU", rule_name),
            ("PB", black), ("PW", white), ("DT", date_text)]
    if event:
        root.append(("EV", event))
    if result is not None:
        root.append(("RE", result))
    if game_comment:
        root.append(("GC", game_comment))
    return sgf_record(root, [("B" if i % 2 == 0 else "W", sgf_point(p, size), comments.get(i))
                             for i, p in enumerate(moves)])


def write_sgf(path: str | Path, moves: Sequence[int], **kwargs: Any) -> Path:
    """Write `game_to_sgf(moves, **kwargs)` to `path` (UTF-8, parent folders created)."""
    return write_sgf_text(path, game_to_sgf(moves, **kwargs))


def write_sgf_text(path: str | Path, text: str) -> Path:
    """Write SGF `text` to `path` (UTF-8, parent folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---- Go --------------------------------------------------------------------------------------
def go_sgf(
    moves: Sequence[Move],
    *,
    size: int = GO_SIZE,
    komi: float = GO_KOMI,
    black: str = "",
    white: str = "",
    result: str | None = None,
    comments: Sequence[str | None] = (),
    event: str | None = None,
) -> str:
    """An SGF (FF[4], GM[1]) record of a Go game: one node per move, passes as B[] / W[]."""
    root = [("GM", "1"), ("FF", "4"), ("CA", "UTF-8"), ("AP", f"{APP_NAME}:{app_version()}"),
            ("SZ", str(size)), ("KM", f"{komi:g}"), ("RU", "Chinese")]
    root += [(key, value) for key, value in (("PB", black), ("PW", white)) if value]
    if result is not None:
        root.append(("RE", result))
    if event:
        root.append(("EV", event))
    return sgf_record(root, [("B" if color == BLACK else "W", coords.sgf_name(point, size),
                              comments[i] if i < len(comments) else None)
                             for i, (color, point) in enumerate(moves)])
