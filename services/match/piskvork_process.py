"""A Gomocup brain in a subprocess, driven as the Piskvork manager drives it.

Why: Gomocup brains (Rapfi, Yixin, Embryo, our own `services.protocols.gomocup`) speak the
Piskvork protocol (https://plastovicka.github.io/protocl2en.htm) on stdin/stdout: the manager
writes one command a line; the brain answers one line, and may write ``MESSAGE ...`` and
``DEBUG ...`` lines at any time, which are logged and skipped here. `command` sends a line and
returns the brain's answer; `send` writes lines that get no answer (``INFO``, the records of
``BOARD``). An ``ERROR``, ``UNKNOWN`` answer, a brain that exits or stays silent past the
timeout is a `PiskvorkError` naming the command.
"""

from __future__ import annotations

import logging
import queue
import subprocess
import threading
from collections.abc import Sequence
from contextlib import suppress

log = logging.getLogger(__name__)

DEFAULT_ANSWER_TIMEOUT_S = 60.0
_SKIPPED = ("MESSAGE", "DEBUG")


class PiskvorkError(RuntimeError):
    """The brain answered ERROR or UNKNOWN, died, or did not answer in time."""


class PiskvorkProcess:
    """A brain in a subprocess. Its output is read by a thread into a queue, so a brain that
    hangs costs `answer_timeout_s`, never the match."""

    def __init__(self, argv: Sequence[str],
                 answer_timeout_s: float = DEFAULT_ANSWER_TIMEOUT_S) -> None:
        self.argv = list(argv)
        self.answer_timeout_s = answer_timeout_s
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, bufsize=1,
            )
        except OSError as exc:
            raise PiskvorkError(f"cannot start {self.argv[0]}: {exc}") from exc
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"piskvork-{self.proc.pid}")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\r\n"))
        self._lines.put(None)

    def send(self, *lines: str) -> None:
        """Write lines that get no answer."""
        assert self.proc.stdin is not None
        try:
            for line in lines:
                self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise PiskvorkError(f"{self.argv[0]} exited ({lines[0]!r})") from exc

    def command(self, *lines: str) -> str:
        """Write `lines` (a command, and the records of BOARD up to DONE) and return the
        brain's answer line."""
        self.send(*lines)
        while True:
            try:
                line = self._lines.get(timeout=self.answer_timeout_s)
            except queue.Empty:
                raise PiskvorkError(f"{self.argv[0]} gave no answer to {lines[0]!r} within "
                                    f"{self.answer_timeout_s:g} s") from None
            if line is None:
                raise PiskvorkError(f"{self.argv[0]} closed its output ({lines[0]!r})")
            word = line.split(" ", 1)[0].upper()
            if word in _SKIPPED or not line.strip():
                log.debug("%s: %s", self.argv[0], line)
                continue
            if word in ("ERROR", "UNKNOWN"):
                raise PiskvorkError(f"{self.argv[0]} answered {lines[0]!r} with {line!r}")
            return line.strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            with suppress(PiskvorkError):
                self.send("END")
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


__all__ = ["DEFAULT_ANSWER_TIMEOUT_S", "PiskvorkError", "PiskvorkProcess"]
