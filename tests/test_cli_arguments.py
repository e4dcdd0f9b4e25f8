"""`movepred` refuses bad arguments with a one-line usage error before it calls anything.

No service runs here: each command either fails in argparse (exit 2) or in its own checks
before its first call. Each case once ended in a traceback (protobuf's ValueError for a number
past int32, FileNotFoundError for a missing record, matplotlib's error after the search for a
PNG path that cannot be written) or in a silent wrap.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from services import cli

ROOT = Path(__file__).resolve().parents[1]
CLOSED = "127.0.0.1:1"  # nothing listens: a command that got as far as calling would say so


@pytest.mark.parametrize(("argv", "message"), [
    (["genmove", "--visits", "99999999999999999999"], "--visits: must be in 0..2147483647"),
    (["analyze", "--every", "-1"], "--every: must be in 0..2147483647, got -1"),
    (["predict", "--top-k", "2147483648"], "--top-k: must be in 0..2147483647"),
    (["predict", "--size", "-9"], "--size: must be in 0..2147483647, got -9"),
    (["predict", "--timeout", "nan"], "--timeout: must be in 0.001..86400, got nan"),
    (["genmove", "--timeout", "-1"], "--timeout: must be in 0.001..86400, got -1"),
    (["infer", "--seed", "-1"], "--seed: must be in 0..18446744073709551615, got -1"),
    (["infer", "--moves", "-1"], "--moves: must be in 0..2147483647, got -1"),
    (["predict", "--png", "board.txt"], "--png: board.txt: must end in .png"),
])
def test_numbers_and_paths_are_checked_by_argparse(argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--target", CLOSED])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_output_paths_are_checked_before_the_call(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    for argv, message in ((["predict", "--png", str(tmp_path / "no" / "a.png")], "no folder"),
                          (["analyze", "--png", str(tmp_path)], "must end in .png"),
                          (["infer", "--out", str(tmp_path), "--black", "h8"], "is a folder")):
        with pytest.raises(SystemExit):
            cli.main([*argv, "--target", CLOSED])
        assert message in capsys.readouterr().err, argv


def test_a_record_that_cannot_be_read_says_why(tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty.sgf"
    empty.write_text("")
    folder = tmp_path / "games.rif"
    folder.mkdir()
    for record, message in ((tmp_path / "missing.rif", "missing.rif: no such file"),
                            (folder, "games.rif: no such file"),
                            (empty, "no game 0 (0 readable; empty file)")):
        assert cli.main(["infer", "--record", str(record), "--target", CLOSED]) == 2
        printed = capsys.readouterr().err
        # rich wraps at the terminal's width, at a blank (dropping it) or inside a long path,
        # wherever this run's temporary path puts the edge: compare without any blanks
        assert "".join(message.split()) in "".join(printed.split()), printed


def test_front_ends_refuse_budgets_the_service_would_refuse_at_every_move(
        capsys: pytest.CaptureFixture) -> None:
    """A GTP or Gomocup engine started with --visits past the service's limit answered every
    genmove with an internal error; now it does not start."""
    from services.protocols import gomocup, gtp

    gtp_parser = argparse.ArgumentParser()
    gtp.add_arguments(gtp_parser)
    for parse, argv in ((gtp_parser.parse_args, ["--visits", "100001"]),
                        (gtp_parser.parse_args, ["--time-ms", "-5"]),
                        (gomocup._parse_args, ["--visits", "100001"])):
        with pytest.raises(SystemExit) as exit_info:
            parse(argv)
        assert exit_info.value.code == 2 and "must be in 0.." in capsys.readouterr().err
    assert gtp_parser.parse_args(["--visits", "100000"]).visits == 100_000


@pytest.mark.parametrize(("script", "argv", "message"), [
    ("infer_eval.py", ["run", "--game", "go", "--prepared", "/nonexistent", "--dataset", ".",
                       "--model", "Makefile", "--results", "r.jsonl"], "--prepared /nonexistent"),
    ("infer_eval.py", ["run", "--game", "go", "--prepared", ".", "--dataset", ".", "--model",
                       "Makefile", "--results", "r.jsonl", "--threads", "0"], "must be in 1..256"),
    ("infer_eval.py", ["report", "--results-dir", "/nonexistent"], "no such folder"),
    ("infer_eval.py", ["prepare", "--game", "go", "--out", "x", "--records", "Makefile"],
     "so --game gomoku"),
    ("infer_eval.py", ["prepare", "--game", "gomoku", "--out", "x", "--records", "/no.rif"],
     "--records /no.rif: no such file"),
    ("infer_eval.py", ["run", "--game", "go", "--prepared", ".", "--dataset", ".", "--rulebot",
                       "--results", "r.jsonl"], "--rulebot: the rule-based Gomoku player"),
    ("infer_eval.py", ["run", "--game", "gomoku", "--prepared", ".", "--dataset", ".",
                       "--rulebot", "--model", "Makefile", "--results", "r.jsonl"],
     "not allowed with argument"),
    ("paper_table.py", ["--depths", "a"], "comma-separated whole numbers"),
    ("paper_table.py", ["--jobs", "0"], "must be in 1..256, got 0"),
])
def test_evaluation_scripts_refuse_bad_arguments_before_any_work(
        script: str, argv: list[str], message: str) -> None:
    """They once failed with a traceback, some after building a dataset."""
    run = subprocess.run([sys.executable, f"scripts/{script}", *argv], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr
