"""Reading a session file: random access to a recorded session, plain or zstd, of any length.

Opening cuts the file into segments (console/sessions/source.py) without parsing JSON, keeps
that index beside large files (console/sessions/index.py), or resumes from the recorder's
journal after a kill -9 (console/sessions/live_index.py); events are then read by number, by
time, or by markers (console/sessions/markers.py) without reading everything.
"""

from __future__ import annotations

import bisect
import mmap
import os
import stat
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from console.errors import BadLine, FrameError, SessionFormatError
from console.sessions import index as session_index
from console.sessions import live_index as session_live_index
from console.sessions.decode import decode_record
from console.sessions.header import parse_header
from console.sessions.markers import MarkerFinder
from console.sessions.source import ZSTD_MAGIC, Segment, Source, first_ts, scan_plain, split_events
from console.sessions.zstd_scan import scan_zstd
from remote.spine.events import Event, format_ts, parse_ts
from remote.spine.intake import corrupt, line_number

HEADER_MAX = 64 << 20  # the longest first line taken as a header


class SessionReader:
    """Random access to a session file, plain or zstd, of any length.

    Opening finds the segments (console/sessions/source.py) or reuses the persistent index
    beside the file (console/sessions/index.py); an event is read by decoding its segment's
    lines, the last few segments cached, so replaying in order and stepping back and forth
    around one point cost one split per segment, not one per event."""

    MAX_WARNINGS = 20

    def __init__(self, path: str | os.PathLike[str], *, write_index: bool | None = None,
                 find_markers: bool = True) -> None:
        """`find_markers=False` (a printer, which never seeks) leaves the markers out of a cold
        open's scan: they were two thirds of it on a real run (its stage events are
        markers). The index is written without them, and the first reader to ask for them
        finds them and writes it again with them."""
        self.path = Path(path)
        self._find_at_open = find_markers
        self._fp: dict[str, Any] | None = None
        self.warnings: list[str] = []
        self._dropped_warnings = 0
        self._mm: Any = None
        self._cache: dict[int, list[bytes]] = {}
        self._seg_keys: list[str] | None = None
        self._fd: int | None = self._open()
        try:
            self._load(write_index)
        except BaseException:
            self.close()
            raise

    def _open(self) -> int:
        try:
            # O_NONBLOCK: a FIFO given as a session must not block the open waiting for a writer.
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise SessionFormatError(f"{self.path}: cannot open: {exc.strerror or exc}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise SessionFormatError(f"{self.path}: not a regular file (a FIFO, device or "
                                     "directory), not a console session")
        self._stat = st
        return fd

    def _load(self, write_index: bool | None) -> None:
        size = self._stat.st_size
        if size == 0:
            raise SessionFormatError(f"{self.path}: empty file, not a console session")
        self._mm = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)  # type: ignore[arg-type]
        self.compressed = self._mm[:4] == ZSTD_MAGIC
        self._source = Source(self._mm, self.compressed)
        assert self._fd is not None
        fp = session_index.fingerprint(self._fd, size, self._stat.st_mtime_ns)
        cached = session_index.load(self.path, fp)
        # After a kill -9 of the recorder: its journal, as far as the file agrees with it.
        live = (None if cached is not None else
                session_live_index.load(self.path, self._mm, size, self.compressed))
        self.resumed_events = live.count if live is not None else 0
        if cached is not None:
            header_line = cached["header"]
            self.header = parse_header(self.path, header_line, complete=True)
            self._segments: list[Segment] = cached["segments"]
            self._markers: list[int] | None = cached["markers"]
            self._header_line = header_line
            self._index_warnings = list(cached["warnings"])
            if self._markers is None:  # kept by a printer: saved again once they are found
                self._fp = fp
            for w in cached["warnings"]:
                self.warn(w)
            self._end = cached["end"]
            self.index_reused = True
        else:
            self.index_reused = False
            worth_it = size >= (session_index.MIN_BYTES_COMPRESSED if self.compressed
                                else session_index.MIN_BYTES)
            keep = bool(write_index or (write_index is None and worth_it))
            # Markers are found while the scan holds each segment's bytes, plain or just
            # decompressed (a second pass was a third of a plain cold open and 60 % of a
            # compressed one); a printer never asks for them.
            finder = (MarkerFinder() if (keep and self._find_at_open) or live is not None
                      else None)
            self._scan(size, finder, live)
            self._markers = None
            if finder is not None:
                self._markers = (live.markers if live is not None else []) + finder.result()
            self._index_warnings = list(self.warnings)
            if keep and session_index.save(self.path, fp, self._segments, self._markers,
                                           self._index_warnings, self._header_line, self._end):
                self._fp = fp  # saved without markers: saved again once they are found
        self._firsts = [s.first for s in self._segments]
        self._len = self._segments[-1].first + self._segments[-1].count if self._segments else 0

    def _scan(self, size: int, finder: MarkerFinder | None,
              live: session_live_index.Resumed | None) -> None:
        """The segments, found by one pass over the file. With `live` (the recorder's journal
        after a kill -9) the events it covers are taken from it: only the tail written after
        its last row (the segment the recorder was filling when killed) is scanned."""
        mm = self._mm
        feed, forget = (finder.feed, finder.forget) if finder is not None else (None, None)
        start, first, header = (live.end, live.count, live.header) if live else (0, 0, None)
        scan_warnings: list[str] = []
        if not self.compressed and header is None:  # said before the scan, if not a session
            # a header padded with whitespace is a header: its newline is looked for that far
            end = mm.find(b"\n", 0, min(size, HEADER_MAX))
            if end < 0 and size > HEADER_MAX:
                raise SessionFormatError(f"{self.path}: not a console session file (its first "
                                         f"line is longer than {HEADER_MAX >> 20} MiB)")
            header, start = mm[: end if end >= 0 else size], end + 1
            self.header = parse_header(self.path, header, complete=end >= 0)
        if self.compressed:
            try:
                header, segments = scan_zstd(mm, size, scan_warnings, feed, forget, start=start,
                                             first=first, header=header)
            except FrameError as exc:
                raise SessionFormatError(
                    f"{self.path}: corrupt zstd data, not a readable session ({exc})") from None
            if header is None:
                raise SessionFormatError(f"{self.path}: corrupt zstd data, not a readable "
                                         "session (no complete first line)")
            self._end = size
        else:
            segments, self._end = scan_plain(mm, start, size, first, scan_warnings, feed)
        assert header is not None  # the journal's, or found above
        if self.compressed or live is not None:
            self.header = parse_header(self.path, header, complete=True)
        self._segments = (live.segments if live is not None else []) + segments
        self._header_line = bytes(header)
        for w in scan_warnings:
            self.warn(w)

    def _find_markers(self) -> list[int]:
        """Events worth seeking to, found by one regex pass per segment (kept in the index)."""
        finder = MarkerFinder()
        for first, _, data in self.segment_data():
            finder.feed(first, data)
        return finder.result()

    def _segment_bytes(self, seg: Segment) -> bytes | None:
        try:
            return self._source.data(seg)
        except FrameError as exc:
            self.warn(f"{exc}; events {seg.first}-{seg.first + seg.count - 1} skipped")
            return None

    def warn(self, message: str) -> None:
        """A problem found here or by a consumer of this session (a corrupt record it skipped):
        the first MAX_WARNINGS kept, the rest counted."""
        if len(self.warnings) < self.MAX_WARNINGS:
            self.warnings.append(message)
        else:
            self._dropped_warnings += 1

    def warning_summary(self) -> list[str]:
        extra = ([f"... and {self._dropped_warnings:,} more problems of the same kinds"]
                 if self._dropped_warnings else [])
        return self.warnings + extra

    def __len__(self) -> int:
        """Records (lines): what positions, seeks and markers count. A job.lines record is one
        position holding many job.line events; in older sessions every record is one event."""
        return self._len

    def redactions(self) -> int | None:
        """Secrets masked while recording (its closing session.redactions record), None when
        it did not redact (--no-redact, or an older file)."""
        if self.header.redact is not True:
            return None
        if self._len:  # a torn or damaged last line: the count is unknown, not fatal
            try:
                last = self.record(self._len - 1)
            except Exception:
                return 0
            if len(last) == 1 and last[0].kind == "session.redactions":
                return c if isinstance(c := last[0].payload.get("count"), int) else 0
        return 0

    def redaction_note(self) -> str:
        """What replay's header line and the report say of secrets ("" before redaction)."""
        masked = self.redactions()
        return ("" if self.header.redact is None else "secrets kept (--no-redact)" if masked is None
                else f"{masked} secret(s) masked")

    def _segment_of(self, i: int) -> int:
        if not 0 <= i < self._len:
            raise IndexError(f"event {i} is outside the session (0-{self._len - 1})")
        return bisect.bisect_right(self._firsts, i) - 1

    def _lines(self, k: int) -> list[bytes]:
        hit = self._cache.get(k)
        if hit is not None:
            return hit
        seg = self._segments[k]
        data = self._segment_bytes(seg)
        lines = split_events(data) if data is not None else []
        if len(lines) != seg.count:  # the file changed under us, or its frame went bad
            lines = (lines + [b""] * seg.count)[: seg.count]
        if len(self._cache) >= 4:
            self._cache.pop(next(iter(self._cache)))
        self._cache[k] = lines
        return lines

    def line(self, i: int) -> bytes:
        """The raw bytes of event `i`'s line."""
        k = self._segment_of(i)
        return self._lines(k)[i - self._segments[k].first]

    def record(self, i: int) -> Sequence[Event]:
        """The events of record `i`: a log block's job.line events (a JobLines, the batch the
        live tail published), or the record's one event."""
        if i < 0:
            i += len(self)
        try:
            return decode_record(self.line(i))
        except BadLine as exc:
            raise SessionFormatError(f"{self.path}: event {i} is corrupt (line "
                                     f"{line_number(i)}): {exc}") from None

    def event(self, i: int) -> Event:
        """The event at position `i` (positions count records: a log block's position is its
        first line)."""
        return self.record(i)[0]

    def segments(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, list[bytes]]]:
        """(index of the first, lines) for runs of events from `start` up to `stop`, in order:
        what the fast printers consume."""
        stop = len(self) if stop is None else min(stop, len(self))
        start = max(start, 0)
        if start >= stop:
            return
        k = self._segment_of(start)
        while k < len(self._segments) and self._segments[k].first < stop:
            seg = self._segments[k]
            data = self._segment_bytes(seg)
            if data is not None:
                lines = split_events(data)
                lo = max(start - seg.first, 0)
                hi = min(stop - seg.first, len(lines))
                yield seg.first + lo, lines[lo:hi] if (lo or hi < len(lines)) else lines
            k += 1

    def segment_data(self) -> Iterator[tuple[int, int, bytes]]:
        """(index of the first event, events, bytes) of every segment, the bytes being whole
        lines, blank ones included: what `replay --json` checks and passes through as is."""
        for seg in self._segments:
            data = self._segment_bytes(seg)
            if data is not None:
                yield seg.first, seg.count, data

    def events(self, start: int = 0, stop: int | None = None) -> Iterator[Event]:
        """Complete events in order; a corrupt line in the middle is reported and skipped."""
        for record in self.records(start, stop):
            yield from record

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[Sequence[Event]]:
        """The events of each record from `start` up to `stop`, one sequence per position (a
        log block's is a JobLines): what folds a block at a time. A corrupt record, or one in
        a segment that cannot be read, is an empty sequence (reported), so positions stay
        aligned."""
        stop = len(self) if stop is None else min(stop, len(self))
        at = max(start, 0)
        for first, lines in self.segments(start, stop):
            while at < first:  # a segment that could not be read
                at += 1
                yield ()
            for line in lines:
                try:
                    yield decode_record(line)
                except BadLine as exc:
                    self.warn(corrupt(at, str(exc)))
                    yield ()
                at += 1
        while at < stop:
            at += 1
            yield ()

    def ts_at(self, i: int) -> str:
        return first_ts(self.line(i)) or format_ts(self.event(i).ts)

    def time_of(self, i: int) -> datetime:
        return parse_ts(self.ts_at(i))

    def index_at_time(self, when: datetime) -> int:
        """First event at or after `when` (events are recorded in time order): a bisection
        over the segments' first times, then over one segment's lines."""
        key = format_ts(when)
        keys = self._seg_keys
        if keys is None:
            # A segment whose first line has no readable ts takes its predecessor's, so the
            # keys stay sorted and bisection stays right around a damaged line.
            keys, last = [], ""
            for seg in self._segments:
                last = seg.ts or last
                keys.append(last)
            self._seg_keys = keys
        j = bisect.bisect_left(keys, key)
        if j == 0:
            return 0
        seg = self._segments[j - 1]
        lo = bisect.bisect_left(range(seg.first, seg.first + seg.count), key, key=self._ts_key)
        return seg.first + lo

    def _ts_key(self, i: int) -> str:
        try:
            return self.ts_at(i)
        except SessionFormatError:
            return ""

    def markers(self) -> list[int]:
        """Indices of events worth seeking to (SEEKABLE_KINDS: found at open, kept in the
        index)."""
        if self._markers is None:
            self._markers = self._find_markers()
            fp, self._fp = self._fp, None
            if fp is not None:
                session_index.save(self.path, fp, self._segments, self._markers,
                                   self._index_warnings, self._header_line, self._end)
        return list(self._markers)

    def close(self) -> None:
        mm = self._mm
        if mm is not None:
            self._mm = None
            mm.close()
        fd = getattr(self, "_fd", None)
        if fd is not None:
            self._fd = None
            os.close(fd)

    def __enter__(self) -> SessionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
