"""The commands the README and docs/reference.md show still parse, and each flow names itself.

Every command line in the two documents (a line of a shell code block, or an inline code span,
that starts with `movepred`, `python -m flows.`/`services.`, `python scripts/`/`benchmarks/`,
`torchrun ... -m` or `make TARGET`) is parsed as its program parses it, without running it:

* `movepred ...` by the command's own argparse parser (`services.cli.build_parser`);
* `python -m MODULE ...` and `python scripts/X.py ...` by running the module as `__main__` with
  argparse stopped right after it parsed the arguments (nothing after the parse runs);
* `make TARGET VAR=...` by `make -n` (the target exists and its recipe expands).

What a document shows as a pattern rather than a command is not checked: optional parts in
brackets are left out, and a span with an ellipsis, alternatives (`a|b`) or a bare CAPITALS
placeholder (`SOURCES`, `N`) is a pattern. Code blocks marked ```` ```text ```` are pictures or
output, not commands.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from services import cli

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "docs/reference.md")
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:\.venv/bin/)?"
                     r"(?:movepred\s|python -m (?:flows|services)\.|python (?:scripts|benchmarks)/"
                     r"|torchrun\s|make [a-z])")
PLACEHOLDER = re.compile(r"\.\.\.|\||(?:^|\s)[A-Z][A-Z_]*(?:\s|$)")


def shown_commands(text: str) -> Iterator[str]:
    """The command lines of a Markdown text: shell code blocks' lines and inline code spans."""
    for language, body in FENCE.findall(text):
        if language.strip() != "text":
            yield from body.splitlines()
    yield from re.findall(r"`([^`\n]+)`", FENCE.sub("", text))


def commands(document: str) -> list[str]:
    """The checkable commands of `document`: comments cut, `&&` split, optional parts left out,
    patterns dropped."""
    out: list[str] = []
    for line in shown_commands((ROOT / document).read_text()):
        line = re.sub(r"\s+#.*$", "", line.strip())
        for part in line.split("&&"):
            part = re.sub(r"\s*\[[^\]]*\]", "", part).strip()
            if COMMAND.match(part) and not PLACEHOLDER.search(part.split(maxsplit=1)[-1]):
                out.append(part)
    return sorted(set(out))


class Parsed(BaseException):
    """Raised by argparse right after a successful parse: the program goes no further."""


def stop_after_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make argparse raise `Parsed` once a program's own call (`parse_args`, or
    `parse_known_args` called directly) has parsed its arguments; the calls argparse makes
    inside `parse_args` (subcommands' parsers) go through untouched."""
    parse_args = argparse.ArgumentParser.parse_args
    parse_known_args = argparse.ArgumentParser.parse_known_args
    inside: list[bool] = []

    def whole(self, args=None, namespace=None):
        inside.append(True)
        try:
            result = parse_args(self, args, namespace)
        finally:
            inside.pop()
        raise Parsed(result)

    def known(self, args=None, namespace=None):
        result = parse_known_args(self, args, namespace)
        if inside:
            return result
        raise Parsed(result)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", whole)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", known)


def parse_module(target: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Run module or script `target` as __main__ on `argv` until its arguments are parsed;
    "" when they parse, else what the program said."""
    path = ROOT / target if target.endswith(".py") else None
    source = path if path else ROOT / (target.replace(".", "/") + ".py")
    if not source.exists():
        source = source.with_suffix("") / "__main__.py"
    assert source.exists(), f"{target}: no such module or script"
    if "argparse" not in source.read_text():  # a program without options: never run here
        return f"{target} takes no arguments" if argv else ""
    if not argv and not path:  # `python -m MODULE` named in a sentence: that it exists
        return ""
    stop_after_parsing(monkeypatch)
    monkeypatch.setattr(sys, "argv", [str(source), *argv])
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported
            if path:
                runpy.run_path(str(path), run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
    except Parsed:
        return ""
    except SystemExit as exc:  # 0: --help, --version
        return "" if exc.code == 0 else f"exit {exc.code}: {said.getvalue()[-800:]}"
    return f"ran without parsing arguments: {said.getvalue()[-800:]}"


def check(command: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """"" when `command` parses as its program parses it, else why not."""
    words = shlex.split(command)
    while re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # an environment assignment
        words.pop(0)
    program = words[0].removeprefix(".venv/bin/")
    if program == "movepred":
        parser, _ = cli.build_parser()
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
                parser.parse_args(words[1:])
        except SystemExit as exc:  # 0: --help, --version
            return "" if exc.code == 0 else f"exit {exc.code}: {said.getvalue().strip()}"
        return ""
    if program == "make":
        run = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        return "" if run.returncode == 0 else run.stderr.strip()
    if program == "torchrun":
        words = ["python", *words[words.index("-m"):]]
        program = "python"
    assert program == "python", command
    if words[1] == "-m":
        return parse_module(words[2], words[3:], monkeypatch)
    return parse_module(words[1], words[2:], monkeypatch)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_command_the_documents_show_parses(document: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    shown = commands(document)
    assert len(shown) >= (5 if document == "README.md" else 40), shown  # the extraction works
    failed = {}
    for command in shown:
        with monkeypatch.context() as patch:
            why = check(command, patch)
        if why:
            failed[command] = why
    assert not failed, failed


def test_a_wrong_command_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: a misspelt option, subcommand, module option or target fails it."""
    for wrong in ("movepred infer --no-such-option 3", "movepred no-such-command",
                  "python -m flows.ingest --no-such-option", "make no-such-target",
                  "python scripts/stack.py sideways"):
        with monkeypatch.context() as patch:
            assert check(wrong, patch), wrong
    with monkeypatch.context() as patch:
        assert check("python -m flows.ingest data/sample/selfplay.rif --out x", patch) == ""


@pytest.mark.parametrize("flow", sorted(p.stem for p in (ROOT / "flows").glob("*.py")
                                        if not p.stem.startswith("_")))
def test_every_flow_names_itself_as_it_is_run(flow: str, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """`--help` of a flow said `usage: ingest.py`: argparse's default prog is the file name."""
    monkeypatch.setattr(sys, "argv", [str(ROOT / "flows" / f"{flow}.py"), "--help"])
    said = io.StringIO()
    with contextlib.redirect_stdout(said), pytest.raises(SystemExit) as exit_info, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        runpy.run_module(f"flows.{flow}", run_name="__main__", alter_sys=True)
    assert exit_info.value.code == 0
    assert said.getvalue().startswith(f"usage: python -m flows.{flow} "), said.getvalue()[:200]
