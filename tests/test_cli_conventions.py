"""`movepred` keeps the conventions of a command line, without any service running.

* `movepred --version` prints the installed package's version;
* an error goes to stderr, whatever the command: stdout holds only what the command made,
  and with `--json` it is JSON or nothing, so a script that parses it never parses a complaint;
* `movepred infer --size` names the board size as every other command does, and the old
  `--board-size` still works, with a note.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import pytest

from services import cli

CLOSED = "127.0.0.1:1"  # nothing listens: a command that calls gets UNAVAILABLE at once


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"movepred {version('movepred')}"


@pytest.mark.parametrize("argv", [
    ["predict", "--target", CLOSED, "h8"],
    ["predict", "--target", CLOSED, "z99"],  # not a point: refused before the call
    ["genmove", "--target", CLOSED, "--visits", "1", "h8"],
    ["analyze", "--target", CLOSED, "--visits", "1", "h8"],
    ["infer", "--target", CLOSED, "--black", "h8", "--white", "h9"],
    ["infer", "--target", CLOSED, "--record", "no-such-file.rif"],
    ["play", "--target", CLOSED, "--out", "{tmp}/game.sgf"],
    ["play", "--target", CLOSED, "--game", "go", "--rule", "renju", "--out", "{tmp}/go.sgf"],
    ["play", "--target", CLOSED, "--game", "go", "--out", "{tmp}/go.rif"],
    ["rollout", "--triton-url", CLOSED, "--repository", "{tmp}"],
])
def test_errors_go_to_stderr(argv: list[str], tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main([a.format(tmp=tmp_path) for a in argv])
    printed = capsys.readouterr()
    assert code != 0
    assert "error:" in printed.err, printed
    assert "error" not in printed.out.lower(), printed.out


@pytest.mark.parametrize("argv", [
    ["rollout", "--json", "--triton-url", CLOSED, "--repository", "{tmp}"],  # nothing published
    ["rollback", "--json", "--triton-url", CLOSED, "--repository", "{tmp}"],
    ["serving", "--json", "--triton-url", CLOSED, "--repository", "{tmp}"],  # Triton away
    ["status", "--json"],
])
def test_with_json_stdout_is_json_or_nothing(argv: list[str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main([a.format(tmp=tmp_path) for a in argv])
    printed = capsys.readouterr()
    if printed.out.strip():
        json.loads(printed.out)  # raises on anything but one JSON document
    else:
        assert code != 0 and "error:" in printed.err, printed


def test_infer_takes_size_and_the_old_board_size(capsys: pytest.CaptureFixture[str]) -> None:
    parser, _ = cli.build_parser()
    assert parser.parse_args(["infer", "--game", "go", "--size", "13"]).size == 13
    assert parser.parse_args(["infer"]).size == 0  # the game's default
    assert capsys.readouterr().err == ""
    assert parser.parse_args(["infer", "--game", "go", "--board-size", "9"]).size == 9
    assert "--board-size is deprecated; use --size" in capsys.readouterr().err
    assert "--board-size" not in parser._subparsers._group_actions[0].choices[  # type: ignore
        "infer"].format_help()
