"""A GTP engine in a subprocess (GNU Go, KataGo, Leela Zero, ...), driven over its pipes.

Why here: a match plays our versions against outside engines; the one protocol every Go
program speaks is GTP (https://www.lysator.liu.se/~gunnar/gtp/). `GtpProcess` sends one
command a line and reads the answer up to its blank line; an error answer (``? ...``), an
engine that exits or closes its output is a `GtpProcessError` naming the command. `find_gnugo`
finds GNU Go where Debian installs it (``apt-get install gnugo``: /usr/games/gnugo, which is not
on every PATH).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

DEFAULT_GNUGO = "/usr/games/gnugo"


def find_gnugo(path: str | None = None) -> str | None:
    """The gnugo binary: `path`, on PATH, or /usr/games/gnugo (Debian's place); None if none."""
    for candidate in (path, shutil.which("gnugo"), DEFAULT_GNUGO):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    return None


class GtpProcessError(RuntimeError):
    """The GTP subprocess answered with an error or died."""


class GtpProcess:
    """A GTP engine in a subprocess: `send(command)` returns the answer text (after "= ")."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, bufsize=1,
            )
        except OSError as exc:
            raise GtpProcessError(f"cannot start {self.argv[0]}: {exc}") from exc

    def send(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise GtpProcessError(f"{self.argv[0]} exited ({command!r})") from exc
        lines = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise GtpProcessError(f"{self.argv[0]} closed its output ({command!r})")
            line = line.rstrip("\r\n")
            if not line and lines:
                break
            if line or lines:
                lines.append(line)
        text = "\n".join(lines)
        if text.startswith("?"):
            raise GtpProcessError(f"{command!r}: {text[1:].strip()}")
        return text[1:].strip() if text.startswith("=") else text

    def close(self) -> None:
        if self.proc.poll() is None:
            with suppress(GtpProcessError, OSError):
                self.send("quit")
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


__all__ = ["DEFAULT_GNUGO", "GtpProcess", "GtpProcessError", "find_gnugo"]
