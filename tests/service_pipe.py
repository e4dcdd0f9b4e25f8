"""A project module run as its front end runs it: `python -m <module>` spoken to through pipes.

The GTP engine (a GUI), the KataGo analysis engine (a review tool) and the Gomocup brain (the
Piskvork manager) are tested as such a program sees them: lines written to stdin, lines read
from stdout. Their tests subclass `ServicePipe` for their protocol's words (a GTP response up
to its empty line, one JSON object a line, the brain's MESSAGE lines); the process, the reading
and the failure messages are the same for all three, so they live here once.

stdout is read by a thread into a queue, so a test waits for a line with a timeout: a program
that goes silent or exits fails the test with what it logged, never hangs it. stderr is read
by a second thread too (a full stderr pipe would stop the program), and its tail goes into
every failure message.

`ServicePipe` starts a project module in a subprocess, so tests/conftest.py classes every test
that uses it, or a subclass of it, as an integration test.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STDERR_LINES = 40  # the tail of stderr a failure message shows


class ServicePipe:
    """`python -m module *args` in the repository root, stdin and stdout as pipes of text
    lines; `line_end` is what the program's front end ends its lines with."""

    def __init__(self, module: str, *args: str, line_end: str = "\n") -> None:
        self.line_end = line_end
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=ROOT)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._stderr_reader = threading.Thread(target=self._pump_stderr, daemon=True)
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        self._stderr_reader.start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def stderr(self) -> str:
        """The last lines the program wrote to stderr."""
        return "".join(self._stderr)

    def send(self, *lines: str) -> None:
        assert self.proc.stdin is not None
        for line in lines:
            self.proc.stdin.write(line + self.line_end)
        self.proc.stdin.flush()

    def raw_line(self, timeout: float = 60.0) -> str:
        """The next stdout line as written, its line end included (a test of the framing
        looks at it)."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line in {timeout} s; stderr:\n{self.stderr()}") from None
        if line is None:  # its output closed: what it logged on the way out, then fail
            self._stderr_reader.join(timeout=5)
            raise AssertionError(f"the program exited ({self.proc.poll()}); stderr:\n"
                                 f"{self.stderr()}")
        return line

    def line(self, timeout: float = 60.0) -> str:
        """The next stdout line without its line end."""
        return self.raw_line(timeout).rstrip("\r\n")

    def close(self) -> int | None:
        """Kill the program if it still runs; its exit status."""
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait(10)
