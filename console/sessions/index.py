"""The persistent index beside a large session (`<session>.idx`): its segments and markers.

Scanning a day-long session for line ends and markers reads gigabytes; the result is a few
thousand segment rows, so it is kept beside the file and reused while the file is unchanged
(same size, modification time and first and last 64 KiB). Anything else (missing, stale,
unreadable, damaged, written by another version) means a fresh scan: the index is a cache and
never the only copy of anything. It is written atomically, mode 0600, and not at all where the
directory is not writable. While a recorder records, the same path holds its journal instead
(console/sessions/live_index.py, another format, refused here): a reader resumes from it, and
this complete index replaces it at a clean close or at the first open after a kill.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import suppress
from pathlib import Path
from typing import Any

from console.sessions.source import Segment

FORMAT = "eagle3-console-session-index"
VERSION = 1
SUFFIX = ".idx"
# Below this a scan is faster than reading an index: small sessions get no file beside them.
MIN_BYTES = 32 << 20
MIN_BYTES_COMPRESSED = 4 << 20  # about 30 MB of events: a scan decompresses every frame
_SAMPLE = 64 << 10


def index_path(session: Path) -> Path:
    return session.with_name(session.name + SUFFIX)


def fingerprint(fd: int, size: int, mtime_ns: int) -> dict[str, Any]:
    head = os.pread(fd, _SAMPLE, 0)
    tail = os.pread(fd, _SAMPLE, max(0, size - _SAMPLE))
    return {"size": size, "mtime_ns": mtime_ns,
            "sample": hashlib.sha256(head + b"|" + tail).hexdigest()}


def load(session: Path, fp: dict[str, Any]) -> dict[str, Any] | None:
    try:
        with open(index_path(session), "rb") as fh:
            data = json.loads(fh.read(64 << 20))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return None
        if data.get("version") != VERSION or data.get("source") != fp:
            return None
        segments = [Segment.from_list(row) for row in data["segments"]]
        first = 0
        for seg in segments:
            if seg.first != first or seg.src_end > fp["size"]:
                return None
            first += seg.count
        markers = data["markers"]
        warnings = data["warnings"]
        header = data["header"]
        end = data["end"]
        if markers is not None and not (isinstance(markers, list) and all(
                isinstance(m, int) and 0 <= m < first for m in markers)):
            return None  # (None: kept by a printer, which does not look for them)
        if not (isinstance(warnings, list) and all(isinstance(w, str) for w in warnings)):
            return None
        if not isinstance(header, str) or not isinstance(end, int):
            return None
        return {"segments": segments, "markers": markers, "warnings": warnings,
                "header": header.encode("utf-8"), "end": end}
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def save(session: Path, fp: dict[str, Any], segments: list[Segment], markers: list[int] | None,
         warnings: list[str], header: bytes, end: int) -> bool:
    path = index_path(session)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        body = json.dumps({
            "format": FORMAT, "version": VERSION, "source": fp,
            "header": header.decode("utf-8"), "end": end,
            "segments": [s.as_list() for s in segments], "markers": markers,
            "warnings": warnings,
        }, separators=(",", ":"))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(body)
        os.replace(tmp, path)
        return True
    except (OSError, UnicodeDecodeError):
        with suppress(OSError):
            tmp.unlink()
        return False
