"""Every byte of a list of buffers into a file descriptor: the one writev loop both extract
writers use (pipeline/formats.py's 0.9 rows, pipeline/torch_zip.py's 0.3 zip)."""

from __future__ import annotations

import os

IOV = 1024  # buffers per writev call (Linux's IOV_MAX)


def writev_all(fd: int, bufs: list[memoryview], left: int) -> None:
    """All of `bufs` written. A regular file takes a whole writev at once (short writes only
    on a full disk or a signal), so the common case is one call and no list work: trimming
    the list buffer by buffer was O(n²) in the 1,024 buffers of a call, about a fifth of the
    writer's CPU (docs/measurements.md, issue #54). `left`: the buffers' total length."""
    first = 0
    while left:
        n = os.writev(fd, bufs[first:first + IOV] if first else bufs)
        left -= n
        if not left:
            return
        if n == 0:
            raise OSError(f"writev wrote nothing with {left} bytes left")
        while n >= len(bufs[first]):
            n -= len(bufs[first])
            first += 1
        if n:
            bufs[first] = bufs[first][n:]
