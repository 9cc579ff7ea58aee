"""Ending a helper process a test started (a server double, vLLM's bench client): asked to go,
killed after a grace period if it has not, reaped, its pipe closed, so no test leaves a
process or an open descriptor behind."""

from __future__ import annotations

import subprocess
from typing import Any


def end_process(proc: subprocess.Popen[Any], *, grace_s: float, terminate: bool = True) -> None:
    """SIGTERM (unless `terminate` is False: the caller has told it to exit, e.g. by closing
    its stdin), SIGKILL after `grace_s`, then its stdout closed."""
    if terminate and proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
