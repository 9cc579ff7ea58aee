"""The index a recorder keeps on disk while it records (`<session>.idx`, an append-only journal),
so that a session whose recorder was killed still opens without reading every byte.

A day-long recording is the one most likely to end in a kill -9, a crash or a lost SSH session,
and without an index its first open scans gigabytes (7.8-10.3 s at 15 M events). The recorder
already knows where every segment (plain: ~1 MiB of whole lines; zstd: one frame) begins and
ends, how many events it holds and which are seek markers, so it appends one line per segment
when the segment closes: a few hundred bytes per megabyte of session, never a write per event.
A clean close then replaces the journal with the complete index (console/sessions/index.py).

A reader trusts the journal only as far as the file agrees with it, because a wrong seek is
worse than a slow open:
- its first line names the format and holds the session's header line, compared with the
  session's own first bytes (a journal beside another session, or beside a session recorded
  again under the same name, is not used);
- each row ends with the CRC-32 of its own text: a torn or damaged row, and every row after it,
  is left out and those events are scanned instead (what came before stays usable);
- each row holds the CRC-32 of the last bytes of its segment as the file held them, and rows
  must follow one another byte for byte and event for event; one row that disagrees with the
  file (truncated, rewritten, foreign) and the whole journal is refused: a full scan follows;
- where the rows end, the file must be at a line start (plain) or a frame start (zstd).
Only the tail past the last row is scanned. A same-length edit inside a segment, away from its
last bytes, is not detected, as with the complete index (which compares size, time, head and
tail): sessions are append-only and written by the recorder alone.
"""

from __future__ import annotations

import bisect
import glob
import json
import os
import time
import zlib
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console.sessions.index import SUFFIX, index_path
from console.sessions.source import ZSTD_MAGIC, Segment

FORMAT = "eagle3-console-session-live-index"
VERSION = 1
SAMPLE = 64  # last bytes of a segment whose CRC a row holds
_MAX_BYTES = 64 << 20


def _row_line(seg: Segment, markers: list[int], sample_crc: int) -> bytes:
    body = json.dumps([*seg.as_list(), markers, sample_crc], separators=(",", ":")).encode()
    return body + b"\t%08x\n" % zlib.crc32(body)


class LiveIndexWriter:
    """The recorder's side: the journal beside `session`, whose bytes it reads back through
    `fd` (the recorder's own descriptor) for each row's sample. Failures only stop the
    journal: the recording itself never fails because of its index."""

    def __init__(self, session: Path, fd: int) -> None:
        self.session = session
        self.path = index_path(session)
        self._fd = fd
        self._jfd: int | None = None
        self._sent = 0  # rows written
        self.dead = False

    def publish(self, header: bytes, segments: Sequence[Segment], markers: list[int]) -> None:
        """Rows for the segments not yet written. A journal that is no longer the file at its
        path (a reader replaced it with a complete index while we record) is written anew."""
        if self.dead or self._sent == len(segments):
            return
        try:
            if self._jfd is not None and not self._still_ours():
                os.close(self._jfd)
                self._jfd, self._sent = None, 0
            if self._jfd is None:
                self._start(header, segments, markers)
            else:
                _write_all(self._jfd, self._rows(segments[self._sent :], markers))
            self._sent = len(segments)
        except (OSError, ValueError):
            self.dead = True
            self.close()

    def _still_ours(self) -> bool:
        assert self._jfd is not None
        try:
            return os.stat(self.path).st_ino == os.fstat(self._jfd).st_ino
        except FileNotFoundError:
            return False

    def _rows(self, segments: Sequence[Segment], markers: list[int]) -> bytes:
        out = []
        for seg in segments:
            n = min(SAMPLE, seg.src_end - seg.src_start)
            sample = os.pread(self._fd, n, seg.src_end - n)
            if len(sample) != n:
                raise ValueError("session shorter than its segments")
            lo = bisect.bisect_left(markers, seg.first)
            hi = bisect.bisect_left(markers, seg.first + seg.count, lo)
            out.append(_row_line(seg, markers[lo:hi], zlib.crc32(sample)))
        return b"".join(out)

    def _start(self, header: bytes, segments: Sequence[Segment], markers: list[int]) -> None:
        """The first line and every row so far, written aside and renamed into place: a reader
        sees a whole journal or none."""
        head = json.dumps({"format": FORMAT, "version": VERSION, "header": header.decode("utf-8"),
                           "head_len": segments[0].src_start}, separators=(",", ":")).encode()
        body = head + b"\n" + self._rows(segments, markers)
        clear_strays(self.path.parent)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}{_TMP_SUFFIX}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _write_all(fd, body)
            os.replace(tmp, self.path)
        except OSError:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        self._jfd = fd
        os.lseek(fd, 0, os.SEEK_END)

    def close(self) -> None:
        if self._jfd is not None:
            with suppress(OSError):
                os.close(self._jfd)
            self._jfd = None


_TMP_SUFFIX = ".live.tmp"
STRAY_AGE_S = 3600.0  # a first write takes milliseconds: older than this, its writer is gone


def clear_strays(directory: Path, session_name: str = "*") -> int:
    """Removes the `.<session>.idx.<pid>.live.tmp` files that recorders killed during their
    journal's first write left in `directory` (all sessions', or one session's); returns how
    many. The write goes aside and is renamed into place so that a reader never sees half a
    journal, so a kill -9 between the two leaves the aside file behind, and nothing else ever
    would remove it. A file is stray when the process named in it is gone, or when it is older
    than any first write could be (its pid reused since); a running recorder's is left alone.
    A recorder in another pid namespace sharing the directory looks gone: the worst that does
    is lose that recording its journal (the recording itself never fails on its index)."""
    removed = 0
    try:
        found = list(directory.glob(f".{session_name}{SUFFIX}.*{_TMP_SUFFIX}"))
    except OSError:
        return 0
    now = time.time()
    for tmp in found:
        pid_text = tmp.name[: -len(_TMP_SUFFIX)].rpartition(".")[2]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            if _running(int(pid_text)) and now - tmp.stat().st_mtime < STRAY_AGE_S:
                continue
            tmp.unlink()
            removed += 1
        except OSError:
            continue  # gone already, or not ours to remove: it stays harmless
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except (OverflowError, OSError):
        return False
    return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@dataclass(slots=True)
class Resumed:
    """What a journal vouches for: the events before byte `end`."""

    header: bytes
    segments: list[Segment]
    markers: list[int]
    end: int

    @property
    def count(self) -> int:
        return self.segments[-1].first + self.segments[-1].count if self.segments else 0


def load(session: Path, mm: Any, size: int, compressed: bool) -> Resumed | None:
    """The journal's rows that the file agrees with, or None (no journal, not one, or one
    that does not describe this file). The first open after a kill also clears what that
    recorder may have left aside (`clear_strays`)."""
    clear_strays(session.parent, glob.escape(session.name))
    try:
        with open(index_path(session), "rb") as fh:
            data = fh.read(_MAX_BYTES)
    except OSError:
        return None
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a row torn mid-write
    if not lines:
        return None
    try:
        first = json.loads(lines[0])
        if not isinstance(first, dict) or first.get("format") != FORMAT:
            return None
        if first.get("version") != VERSION:
            return None
        header = first["header"].encode("utf-8")
        head_len = first["head_len"]
        if not isinstance(head_len, int) or not 0 < head_len <= size:
            return None
        if _head_line(mm[:head_len], compressed) != header + b"\n":
            return None
        bodies = []
        for line in lines[1:]:
            body, tab, crc = line.rpartition(b"\t")
            if not tab or crc != b"%08x" % zlib.crc32(body):
                break  # torn or damaged: this row and the rest are scanned instead
            bodies.append(body)
        rows = json.loads(b"[" + b",".join(bodies) + b"]")
        segments: list[Segment] = []
        markers: list[int] = []
        pos, count = head_len, 0
        for row in rows:
            seg = Segment.from_list(row[:7])
            seg_markers, sample = row[7], row[8]
            if seg.first != count or seg.src_start != pos or seg.src_end > size or seg.skip:
                return None
            n = min(SAMPLE, seg.src_end - seg.src_start)
            if zlib.crc32(mm[seg.src_end - n : seg.src_end]) != sample:
                return None
            if not (isinstance(seg_markers, list)
                    and all(type(m) is int and seg.first <= m < seg.first + seg.count
                            for m in seg_markers)
                    and seg_markers == sorted(set(seg_markers))):
                return None
            segments.append(seg)
            markers.extend(seg_markers)
            pos, count = seg.src_end, count + seg.count
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError):
        return None
    if not _at_boundary(mm, pos, size, compressed):
        return None
    return Resumed(header, segments, markers, pos)


def _head_line(head: bytes, compressed: bool) -> bytes:
    """The session's header line as its first `head_len` bytes hold it."""
    if not compressed:
        return head
    import zstandard

    try:
        return zstandard.ZstdDecompressor().decompressobj().decompress(head)  # type: ignore[no-any-return]
    except zstandard.ZstdError:
        return b""


def _at_boundary(mm: Any, pos: int, size: int, compressed: bool) -> bool:
    if pos == size:
        return True
    if compressed:
        return mm[pos : pos + 4] == ZSTD_MAGIC
    return mm[pos - 1 : pos] == b"\n"
