"""A full disk told as one line, whatever layer noticed it (issue 33 item 5).

A stage writing hidden states or a checkpoint onto a full filesystem fails deep inside a
library: Python raises OSError(ENOSPC), torch.save a RuntimeError ("PytorchStreamWriter failed
writing file ...: file write failed"), safetensors a SafetensorError quoting Rust's
`StorageFull`. The operator needs the one fact — which disk is full, how much is free — and that
nothing half-written will be trusted: every output is written to a temporary name and renamed,
the manifest last (pipeline/runner.py, pipeline/formats.py), so a re-run once space is freed
resumes from what completed.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from pipeline.units import fmt_bytes

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FULL_WORDS = ("No space left on device", "StorageFull", "Disk quota exceeded")
# torch.save's writer does not say why a write failed ("file write failed", or "unexpected pos
# N vs M" when a short write went unnoticed): believed full only when the disk nearly is
_WRITE_FAILED = ("file write failed", "unexpected pos ")
_NEARLY_FULL = 16 << 20


def mount_point(path: Path) -> Path:
    p = path.resolve()
    while not p.exists():
        p = p.parent
    while not os.path.ismount(p):
        p = p.parent
    return p


def is_disk_full(exc: BaseException, where: Path) -> bool:
    """Whether `exc` (or an exception it was raised from) is a full disk under `where`."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
            return True
        text = str(e)
        if any(w in text for w in _FULL_WORDS):
            return True
        if any(w in text for w in _WRITE_FAILED):
            try:
                return shutil.disk_usage(mount_point(where)).free < _NEARLY_FULL
            except OSError:
                return False
        e = e.__cause__ or e.__context__
    return False


def disk_full_message(stage: str, where: Path) -> str:
    """The one line: which filesystem, how full, and what a re-run keeps."""
    mount = mount_point(where)
    try:
        usage = shutil.disk_usage(mount)
        room = f"{fmt_bytes(usage.free)} free of {fmt_bytes(usage.total)}"
    except OSError:
        room = "its size unknown"
    return (f"{stage}: disk full: no space left on the filesystem at {mount} (holding {where}; "
            f"{room}); nothing half-written is kept: free space and run again, completed work "
            "is reused")
