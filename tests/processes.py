"""Whether a process the test started (or made start) is still there: what the tests of cancels,
kills and lifecycles assert on."""

from __future__ import annotations

import os
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """True while pid runs; a zombie has exited (only its exit status is left for its parent to
    read), so it counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z")


def wait_gone(pids: list[int], timeout: float = 10) -> list[int]:
    """Waits up to `timeout` s for every pid to end; returns those still alive."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]
