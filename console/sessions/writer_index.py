"""The index a recorder writes as it records: a session's segments and markers, known for
free at the moment each batch is written.

Without it, the first open of a day's session scans every byte (a 15 M-event, 3.3 GB session
took 7.8 s here before the TUI could paint), although the recorder knew where every batch
and every frame began, how many events each held and which were seek markers. Once the
session is large enough for a reader to keep an index too, each closed segment is appended to
a journal beside the file (console/sessions/live_index.py), so a recorder killed mid-day leaves
an index that covers all but its last segment; a clean close replaces the journal with the
complete, fingerprinted index (console/sessions/index.py).

A segment's row is appended at the next write after it closed, not at once: the markers among
its last events are registered by the writer just after the write that closed it.
"""

from __future__ import annotations

import os
from pathlib import Path

from console.sessions import index as session_index
from console.sessions.live_index import LiveIndexWriter
from console.sessions.source import PLAIN_SEGMENT, Segment, first_ts


class WriterIndex:
    """Segments as the reader would cut them: for a plain file runs of whole writes of about
    PLAIN_SEGMENT bytes, for a compressed one each frame that holds events."""

    def __init__(self, compressed: bool, live: LiveIndexWriter | None = None) -> None:
        self.compressed = compressed
        self._live = live
        self._due = False  # a segment closed since the journal was last written
        self.segments: list[Segment] = []
        self.markers: list[int] = []
        self.header = b""
        self.usable = True  # false after a failed write: the file may hold a torn line
        self.events = 0  # written so far: its own count, whoever calls the writer's methods
        self._pos = 0  # plain: bytes written; compressed: where the open frame starts
        self._first = self._count = self._size = 0
        self._ts = ""
        self._start = 0

    def wrote(self, data: bytes, events: int) -> None:
        """`data` (whole lines, `events` of them) was written."""
        if self._due:
            self._publish()
        if not events:
            if not self.header:
                self.header = data.rstrip(b"\n")
            if not self.compressed:
                self._pos += len(data)
            return
        if not self._count:
            self._first, self._ts, self._size = self.events, first_ts(data), 0
            self._start = self._pos
        self.events += events
        self._count += events
        self._size += len(data)
        if not self.compressed:
            self._pos += len(data)
            if self._size >= PLAIN_SEGMENT:
                self._close(self._pos)

    def frame_closed(self, raw_pos: int) -> None:
        """A zstd frame ended at `raw_pos` in the file."""
        if self._count:
            self._close(raw_pos)
        self._pos = raw_pos

    def _close(self, end: int) -> None:
        self.segments.append(Segment(self._start, end, self._first, self._count, self._ts,
                                     self._size))
        self._count = 0
        self._due = self._live is not None

    def _publish(self) -> None:
        """The journal's rows, once the session is as large as a reader would index."""
        self._due = False
        live = self._live
        assert live is not None
        if not self.usable:
            live.close()
            return
        small = (session_index.MIN_BYTES_COMPRESSED if self.compressed
                 else session_index.MIN_BYTES)
        if self.segments[-1].src_end >= small:
            live.publish(self.header, self.segments, self.markers)

    def save(self, path: Path) -> bool:
        """Beside `path` when it is large enough for a reader to have kept one too (over the
        journal, if any; a journal left because this fails still describes what it covers)."""
        if self._live is not None:
            self._live.close()
        if not self.usable or not self.header:
            return False
        if not self.compressed and self._count:
            self._close(self._pos)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            small = (session_index.MIN_BYTES_COMPRESSED if self.compressed
                     else session_index.MIN_BYTES)
            if st.st_size < small or st.st_size != self._pos:
                return False  # too small to be worth it, or not all of it written by us
            fp = session_index.fingerprint(fd, st.st_size, st.st_mtime_ns)
        finally:
            os.close(fd)
        return session_index.save(path, fp, self.segments, self.markers, [], self.header,
                                  st.st_size)
