"""``movepred selfplay``: the self-play loop flow (`flows.selfplay`) from the project's command.

    movepred selfplay --game gomoku --run-dir runs/selfplay/gomoku --iterations 3 --games 200
    movepred selfplay --help                  (every flag: the flow's own, LoopSettings, ...)

Every argument after ``selfplay`` goes, as it is, to ``python -m flows.selfplay`` run as a child
process, whose exit status the command returns. Why a child and not a call: the flow is a
front-end of its own (the import contracts keep `services.cli` and `flows` apart), and the
flow's entry takes its Dask tasks from the importable module so that workers can unpickle them
by reference; the flow's parser is then the one source of the command's flags and help, so
the two can never disagree. The child inherits the terminal, the environment (Prefect's API
URL included) and the working folder, so relative paths mean the same in both.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

from services.settings import ROOT

FLOW_MODULE = "flows.selfplay"
EXIT_INTERRUPTED = 130


def flow_command(args: Sequence[str]) -> list[str]:
    """The command line of the flow given `args` (the words after ``movepred selfplay``)."""
    return [sys.executable, "-m", FLOW_MODULE, *args]


def run_flow(args: Sequence[str]) -> int:
    """Run the self-play loop flow with `args`; its exit status (130 after Ctrl-C, which
    reaches the child too: it stops where the loop's kill-safety lets a rerun go on)."""
    env = dict(os.environ)
    # the checkout's packages importable in the child whatever the working folder
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    process = subprocess.Popen(flow_command(args), env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.wait()
        return EXIT_INTERRUPTED


def add_selfplay_command(subparsers: argparse._SubParsersAction
                         ) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Register ``selfplay`` (see the module). Its parser takes every word after the command
    unparsed (no option prefix of its own: ``--help`` and the flow's flags pass through)."""
    p = subparsers.add_parser(
        "selfplay", add_help=False, prefix_chars="+",
        help="run the self-play loop (self-play, ingest, train, gate, rollout): the flows."
             "selfplay flow; 'movepred selfplay --help' lists its flags",
        description="The self-play loop flow; every argument goes to python -m flows.selfplay.")
    p.add_argument("args", nargs=argparse.REMAINDER,
                   help="the flow's arguments (movepred selfplay --help lists them)")
    return {"selfplay": lambda args: run_flow(args.args)}


__all__ = ["add_selfplay_command", "flow_command", "run_flow"]
