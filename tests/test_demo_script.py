"""`scripts/demo.py` empties its --work folder first: only its own, never a user's.

It once ran `shutil.rmtree` on any --work folder it was given.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_folder_that_is_not_the_demo_s_is_refused_and_kept(tmp_path: Path) -> None:
    precious = tmp_path / "notes.txt"
    precious.write_text("mine")
    run = subprocess.run([sys.executable, "scripts/demo.py", "--work", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "not empty and not a demo's folder" in run.stderr
    assert precious.read_text() == "mine"
