"""The test suite leaves the operator's own console directories alone: every console a test
starts (in process or as a child, which inherits the environment) resolves its sessions, local
box, laptop state and console.toml under the session's temporary XDG folders
(tests/conftest.py own_laptop_state)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from console.sessions.writer import default_session_dir
from remote.jobs.cursors import default_cursor_dir
from remote.link.hosts import config_search_path, default_local

REPO = Path(__file__).resolve().parents[2]


def _inside(xdg: Path, paths: list[Path]) -> bool:
    return all(p.resolve().is_relative_to(xdg.resolve()) for p in paths)


def test_the_consoles_of_the_tests_use_the_sessions_own_folders(own_laptop_state: Path) -> None:
    where = [default_session_dir(), Path(default_local().workdir), default_cursor_dir(),
             config_search_path()[1]]
    assert _inside(own_laptop_state, where), (own_laptop_state, where)


def test_a_child_console_inherits_the_same_folders(own_laptop_state: Path) -> None:
    code = ("from console.sessions.writer import default_session_dir as d; "
            "from remote.link.hosts import default_local as l; print(d()); print(l().workdir)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True, env=dict(os.environ, PYTHONPATH=str(REPO))).stdout.split()
    assert len(out) == 2 and _inside(own_laptop_state, [Path(p) for p in out]), out
