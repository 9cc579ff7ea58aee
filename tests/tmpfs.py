"""A small real tmpfs for the tests that need a full disk (the session recorder, the pipeline's
stages). Mounting one needs root, as CI and the developer machines run: without it the test
fails, never skips."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def small_tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """`mnt` (created) as a tmpfs of `size` (mount's notation: 64k, 24m), unmounted after."""
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a {size} tmpfs (the test needs root): {done.stderr}"
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
