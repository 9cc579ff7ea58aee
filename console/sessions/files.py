"""Session files: the durable record of everything a console session saw and did.

JSON lines: a header, then one event per line. A plain file is written per event (or per batch)
so a crash loses at most the line being written, plus, for a Recorder, the batches its writer
thread still held (console/sessions/write_behind.py: none while the disk keeps up). A `.jsonl.zst` file
is one zstd frame per ~1 MiB of events (checksummed, so damage is found, and a unit that can be
read on its own), with the pending data flushed as a zstd block at least every FLUSH_S seconds
by a timer, so a kill -9 of the recorder loses at most the last second of events and the file
stays within a few percent of `zstd -3` of the same lines (a block per event made it 6.5x
larger).
Reading (SessionReader) cuts the file into segments (console/sessions/source.py) without parsing
JSON, keeps that index beside large files (console/sessions/index.py), and seeks by event number
or by time without reading everything.
"""

from __future__ import annotations

import bisect
import errno
import json
import mmap
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import platformdirs

from console import __version__
from console.sessions import index as session_index
from console.sessions import live_index as session_live_index
from console.sessions.decode import BadLine, decode_events, decode_record, event_kinds
from console.sessions.live_index import LiveIndexWriter
from console.sessions.source import (
    ZSTD_MAGIC,
    FrameError,
    Segment,
    Source,
    count_events,
    scan_plain,
    scan_zstd,
    split_events,
)
from console.sessions.write_behind import WriteBehind
from console.sessions.writer_index import WriterIndex
from remote.link.errors import ConsoleError, UsageError
from remote.link.hosts import APP_NAME
from remote.spine.bus import EventBus
from remote.spine.events import SEEKABLE_KINDS, Event, JobLines, format_ts, parse_ts, utc_now

FORMAT = "eagle3-console-session"
VERSION = 1
_TS_PREFIX = b'{"ts":"'
_TS_LEN = 24


class SessionFormatError(UsageError):
    """Not a session file (or an unsupported version): a one-line message, exit code 2."""


class SessionWriteError(ConsoleError):
    pass


class SessionPathError(UsageError):
    """The session file cannot be created where asked: a one-line message, exit code 2."""


# Compressed sessions: a frame is closed after this many bytes or events (the unit a reader
# decompresses to reach one event), and pending data is flushed at least every FLUSH_S seconds.
FRAME_BYTES = 1 << 20
FRAME_EVENTS = 20_000
FLUSH_S = 0.75
_TIMER_TICK_S = 0.2


def default_session_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME)) / "sessions"


def default_session_path(host: str, *, compress: bool = False) -> Path:
    """`<second>-<host>-<pid>.jsonl`: the process id keeps two commands for one host started in
    the same second apart; a number is added when this process already used the name."""
    stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in host) or "session"
    ext = f".jsonl{'.zst' if compress else ''}"
    base = default_session_dir() / f"{stamp}-{safe}-{os.getpid()}"
    path = base.with_name(base.name + ext)
    n = 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}{ext}")
    return path


def _make_private_dirs(directory: Path) -> None:
    """Create missing directories 0700: sessions hold command lines, paths and log text."""
    missing: list[Path] = []
    d = directory
    while not d.exists():
        missing.append(d)
        if d.parent == d:
            break
        d = d.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass


class SessionWriter:
    def __init__(
        self,
        path: str | os.PathLike[str],
        hosts: Sequence[str] = (),
        *,
        started: datetime | None = None,
        compress: bool | None = None,
        live_index: bool = True,
        redact: bool | None = None,
    ) -> None:
        self.path = Path(path)
        self.compress = self.path.name.endswith(".zst") if compress is None else compress
        self.count = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._timer: threading.Thread | None = None
        self._frame_bytes = 0
        self._frame_events = 0
        self._pending = False
        self._last_flush = time.monotonic()
        # Unbuffered: each event goes to the kernel in one write, so a SIGKILL loses at most the
        # line being written, and a failed write (disk full) leaves nothing queued to retry.
        self._raw: IO[bytes] = self._create()
        # The journal beside a large session that a kill -9 leaves usable
        # (console/sessions/live_index.py); `live_index=False` only to measure its cost.
        self._index = WriterIndex(self.compress, LiveIndexWriter(self.path, self._raw.fileno())
                                  if live_index else None)
        self._zw: Any = None
        if self.compress:
            import zstandard

            self._zw = zstandard.ZstdCompressor(level=3, write_checksum=True).stream_writer(
                self._raw, closefd=False)
        header = {
            "format": FORMAT,
            "version": VERSION,
            "started": format_ts(started or utc_now()),
            "hosts": list(hosts),
            "console_version": __version__,
        }
        if redact is not None:  # secret shapes masked before recording (remote/spine/redact.py)
            header["redact"] = redact
        self._write_bytes(json.dumps(header, separators=(",", ":")).encode("utf-8") + b"\n", 0)
        if self._zw is not None:
            # The header in a frame of its own: damage to the first events' frame keeps it.
            self._flush(frame=True)

    def _create(self) -> IO[bytes]:
        try:
            _make_private_dirs(self.path.parent)
            # Read and write: the live index reads back each segment's last bytes.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            raise SessionPathError(f"session file {self.path} already exists; a session is "
                                   "never overwritten: give another --session path") from None
        except OSError as exc:
            raise SessionPathError(f"cannot create session file {self.path}: "
                                   f"{exc.strerror or exc}") from None
        return open(fd, "wb", buffering=0)

    def _write_line(self, line: str) -> None:
        self._write_bytes(line.encode("utf-8") + b"\n", 1)

    def _write_bytes(self, data: bytes, events: int) -> None:
        try:
            if self._zw is not None:
                with self._lock:
                    self._zw.write(data)
                    self._index.wrote(data, events)
                    self._frame_bytes += len(data)
                    self._frame_events += events
                    if self._frame_bytes >= FRAME_BYTES or self._frame_events >= FRAME_EVENTS:
                        self._flush(frame=True)
                    elif time.monotonic() - self._last_flush >= FLUSH_S:
                        self._flush(frame=False)
                    else:
                        self._pending = True
                        if self._timer is None:
                            self._timer = threading.Thread(target=self._flush_timer, daemon=True,
                                                           name=f"session-flush {self.path.name}")
                            self._timer.start()
            else:
                view = memoryview(data)
                while view:
                    view = view[self._raw.write(view) or 0 :]
                self._index.wrote(data, events)
        except OSError as exc:
            self._index.usable = False
            if exc.errno == errno.ENOSPC:
                raise SessionWriteError(f"disk full while recording {self.path}") from exc
            raise SessionWriteError(f"cannot write session {self.path}: {exc}") from exc

    def _flush(self, *, frame: bool) -> None:
        """With the lock held: end the frame (count or size reached) or just the block (time)."""
        import zstandard

        self._zw.flush(zstandard.FLUSH_FRAME if frame else zstandard.FLUSH_BLOCK)
        if frame:
            self._frame_bytes = self._frame_events = 0
            self._index.frame_closed(self._raw.tell())
        self._pending = False
        self._last_flush = time.monotonic()

    def _flush_timer(self) -> None:
        """Flush what has waited FLUSH_S when no further write comes to do it."""
        while not self._closed.wait(_TIMER_TICK_S):
            with self._lock:
                if self._raw.closed:
                    return
                if self._pending and time.monotonic() - self._last_flush >= FLUSH_S:
                    try:
                        self._flush(frame=False)
                    except OSError:
                        return  # the next write reports it

    def write(self, event: Event) -> None:
        self.write_encoded(self.encode((event,)))

    def write_many(self, events: Sequence[Event]) -> None:
        """Events that arrived together, in one write: a SIGKILL loses at most this batch (up to
        remote.jobs.client.BATCH_LINES lines of a block just received), never an earlier one."""
        self.write_encoded(self.encode(events))

    def encode(self, events: Sequence[Event]) -> Encoded:
        """The bytes `write_encoded` writes for these events: done apart so the recorder turns
        events into bytes on the publishing thread and only the write waits for the disk."""
        if isinstance(events, JobLines):  # a log block: job.lines records (a line each)
            data = events.to_records().encode("utf-8")
            return Encoded(data, data.count(b"\n"), len(events), ())
        data = "".join([e.to_json() + "\n" for e in events]).encode("utf-8")
        return Encoded(data, len(events), len(events),
                       tuple(k for k, e in enumerate(events) if e.kind in SEEKABLE_KINDS))

    def write_encoded(self, enc: Encoded) -> None:
        first = self._index.events
        self._write_bytes(enc.data, enc.records)
        self._index.markers.extend(first + k for k in enc.markers)
        self.count += enc.events

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._raw.closed:
                return
            try:
                if self._zw is not None:
                    self._zw.close()
                    self._index.frame_closed(self._raw.tell())
            except OSError:
                self._index.usable = False
                # disk full at the frame end: every flushed event is already on disk
            finally:
                self._raw.close()
        self._index.save(self.path)

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class Encoded:
    """A batch of events as the writer writes it: `records` lines, `events` events, and the
    positions (from the batch's first record) of the seekable ones."""

    data: bytes
    records: int
    events: int
    markers: tuple[int, ...]


@dataclass
class Recorder:
    """Bus consumer that writes every event, in order. The events are encoded as they are
    published; the disk writes run on a thread of their own (console/sessions/write_behind.py), so a
    stalled disk does not stall the event loop. A write failure (disk full) stops recording and
    is reported once; the work itself goes on, since the box keeps its own truth."""

    writer: SessionWriter
    error: str | None = None
    _detach: Any = field(default=None, repr=False)
    _behind: WriteBehind = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._behind = WriteBehind(f"session-writer {self.writer.path.name}")

    def attach(self, bus: EventBus) -> Recorder:
        self._detach = bus.add_batch_callback(self._on_events)
        return self

    def _on_events(self, events: Sequence[Event]) -> None:
        if self.error is not None:
            return
        enc = self.writer.encode(events)
        self._behind.put(lambda: self._write(enc), len(enc.data))

    def _write(self, enc: Encoded) -> None:
        if self.error is not None:
            return
        try:
            self.writer.write_encoded(enc)
        except SessionWriteError as exc:
            self.error = str(exc)
        except Exception as exc:  # a bug: recording stops, loudly, and the console goes on
            self.error = f"recording failed: {type(exc).__name__}: {exc}"

    def after_written(self, work: Callable[[], None]) -> None:
        """Run `work` on the writer's thread once every event published before this call is
        written (or failed to be): a tail's cursor is saved only behind the lines it covers, so
        a kill -9 never leaves a cursor past a line the session did not get."""
        try:
            self._behind.put(work)
        except RuntimeError:  # closed: everything is written already
            work()

    def sync(self) -> None:
        """Wait until every event published so far is written (or recording has failed)."""
        self._behind.drain()

    def close(self) -> None:
        if self._detach:
            self._detach()
            self._detach = None
        self._behind.close()
        self.writer.close()


@dataclass(frozen=True, slots=True)
class SessionHeader:
    started: datetime
    hosts: list[str]
    console_version: str
    version: int
    redact: bool | None = None  # None: a session from before redaction (issue 33)


class _MarkerFinder:
    """Events of the given kinds in segments' bytes: one regex pass per segment, each hit
    confirmed on its parsed line (a payload may hold a nested "kind" key)."""

    def __init__(self, kinds: frozenset[str] = SEEKABLE_KINDS) -> None:
        self.kinds = kinds
        # `kind":"`, not `"kind":"`: the regex engine's literal-prefix search stops at every
        # candidate first character, and `"` is every few bytes of JSON while `k` is rare.
        self.pattern = re.compile(b'kind":"(?:' + b"|".join(re.escape(k.encode())
                                                            for k in sorted(kinds)) + b')"')
        self.found: set[int] = set()

    def feed(self, first: int, data: bytes) -> None:
        # Events before each hit are counted from the previous hit on, not from the start of
        # the segment: counting from the start for every hit made a cold open quadratic in
        # the markers a segment holds (a real run's stage.* events: 15 s at 500k events).
        # Without blank lines (what a recorder writes) a newline count between two hits is
        # the event count, made in place; with them, each stretch is split and counted.
        plain = data[:1] != b"\n" and b"\n\n" not in data
        counted_to, index = 0, first
        at: list[int] = []
        lines: list[bytes] = []
        for m in self.pattern.finditer(data):
            start = data.rfind(b"\n", 0, m.start()) + 1
            if lines and start == counted_to:
                continue  # a second hit inside a line already taken
            index += (data.count(b"\n", counted_to, start) if plain else
                      count_events(data[counted_to:start]))
            end = data.find(b"\n", m.end())
            at.append(index)
            lines.append(data[start:end])
            counted_to = start
        if lines:
            # confirmed on the parsed lines, all in one call: a payload may hold a nested
            # "kind" key, and a corrupt line is no marker
            for i, kind in zip(at, event_kinds(lines), strict=True):
                if kind in self.kinds:
                    self.found.add(i)

    def forget(self, index: int) -> None:
        self.found = {i for i in self.found if i < index}

    def result(self) -> list[int]:
        return sorted(self.found)


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

    # -- opening -------------------------------------------------------------------------------
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
            self.header = self._parse_header(header_line, complete=True)
            self._segments: list[Segment] = cached["segments"]
            self._markers: list[int] | None = cached["markers"]
            self._header_line = header_line
            self._index_warnings = list(cached["warnings"])
            if self._markers is None:  # kept by a printer: saved again once they are found
                self._fp = fp
            for w in cached["warnings"]:
                self._warn(w)
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
            finder = (_MarkerFinder() if (keep and self._find_at_open) or live is not None
                      else None)
            if live is not None:
                assert finder is not None
                self._resume(size, live, finder)
            else:
                self._scan(size, finder)
            self._markers = None
            if finder is not None:
                self._markers = (live.markers if live is not None else []) + finder.result()
            self._index_warnings = list(self.warnings)
            if keep and session_index.save(self.path, fp, self._segments, self._markers,
                                           self._index_warnings, self._header_line, self._end):
                self._fp = fp  # saved without markers: saved again once they are found
        self._firsts = [s.first for s in self._segments]
        self._len = self._segments[-1].first + self._segments[-1].count if self._segments else 0

    def _scan(self, size: int, finder: _MarkerFinder | None = None) -> None:
        mm = self._mm
        scan_warnings: list[str] = []
        if self.compressed:
            try:
                header_line, self._segments = scan_zstd(
                    mm, size, scan_warnings, finder.feed if finder is not None else None,
                    finder.forget if finder is not None else None)
            except FrameError as exc:
                raise SessionFormatError(
                    f"{self.path}: corrupt zstd data, not a readable session ({exc})") from None
            if header_line is None:
                raise SessionFormatError(f"{self.path}: corrupt zstd data, not a readable "
                                         "session (no complete first line)")
            self.header = self._parse_header(header_line, complete=True)
            self._end = size
        else:
            end = mm.find(b"\n", 0, min(size, 1 << 20))
            header_line = mm[: end if end >= 0 else min(size, 4096)]
            self.header = self._parse_header(header_line, complete=end >= 0)
            self._segments, self._end = scan_plain(mm, end + 1, size, 0, scan_warnings,
                                                   finder.feed if finder is not None else None)
        self._header_line = bytes(header_line)
        for w in scan_warnings:
            self._warn(w)

    def _resume(self, size: int, live: session_live_index.Resumed, finder: _MarkerFinder
                ) -> None:
        """The events the recorder's journal covers are taken from it; only the tail written
        after its last row (the segment the recorder was filling when killed) is scanned."""
        scan_warnings: list[str] = []
        self.header = self._parse_header(live.header, complete=True)
        if self.compressed:
            _, tail = scan_zstd(self._mm, size, scan_warnings, finder.feed, finder.forget,
                                start=live.end, first=live.count, header=live.header)
            self._end = size
        else:
            tail, self._end = scan_plain(self._mm, live.end, size, live.count, scan_warnings,
                                         finder.feed)
        self._segments = live.segments + tail
        self._header_line = live.header
        for w in scan_warnings:
            self._warn(w)

    def _parse_header(self, first: bytes, *, complete: bool) -> SessionHeader:
        not_session = f"{self.path}: not a console session file"
        try:
            data = json.loads(first)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise SessionFormatError(f"{not_session} (first line is not a JSON header)") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise SessionFormatError(f"{not_session} (no '{FORMAT}' header)")
        if data.get("version") != VERSION:
            raise SessionFormatError(
                f"{self.path}: session format version {data.get('version')} is not supported "
                f"(this console reads version {VERSION})"
            )
        if not complete:
            raise SessionFormatError(f"{self.path}: header line is incomplete")
        try:
            started = parse_ts(data["started"])
        except (KeyError, ValueError, TypeError, AttributeError):
            raise SessionFormatError(f"{self.path}: header has no valid 'started' time") from None
        hosts = data.get("hosts") or []
        return SessionHeader(
            started=started,
            hosts=[str(h) for h in hosts] if isinstance(hosts, list) else [],
            console_version=str(data.get("console_version", "?")),
            version=VERSION,
            redact=data["redact"] if isinstance(data.get("redact"), bool) else None,
        )

    def _find_markers(self, kinds: frozenset[str] = SEEKABLE_KINDS) -> list[int]:
        """Events worth seeking to, found by one regex pass per segment (kept in the index)."""
        finder = _MarkerFinder(kinds)
        for seg in self._segments:
            data = self._segment_bytes(seg)
            if data is not None:
                finder.feed(seg.first, data)
        return finder.result()

    def _segment_bytes(self, seg: Segment) -> bytes | None:
        try:
            return self._source.data(seg)
        except FrameError as exc:
            self._warn(f"{exc}; events {seg.first}-{seg.first + seg.count - 1} skipped")
            return None

    def warn(self, message: str) -> None:
        """A problem found by a consumer of this session (a corrupt record it skipped)."""
        self._warn(message)

    def _warn(self, message: str) -> None:
        if len(self.warnings) < self.MAX_WARNINGS:
            self.warnings.append(message)
        else:
            self._dropped_warnings += 1

    def warning_summary(self) -> list[str]:
        extra = ([f"... and {self._dropped_warnings:,} more problems of the same kinds"]
                 if self._dropped_warnings else [])
        return self.warnings + extra

    # -- access --------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Records (lines) in the session: positions, seeks and markers count these. A log
        block recorded as one job.lines record is one position holding many job.line events
        (`events()` and `record()` expand it); in a session from before those records every
        record is one event."""
        return self._len

    def redactions(self) -> int | None:
        """Secrets masked while recording (the closing session.redactions record), 0 when the
        session masked none, None when it did not redact (--no-redact, or an older file)."""
        if self.header.redact is not True:
            return None
        if self._len:
            try:
                last = self.record(self._len - 1)
            except Exception:  # a torn or damaged last line: the count is unknown, not fatal
                return 0
            if len(last) == 1 and last[0].kind == "session.redactions":
                count = last[0].payload.get("count")
                return count if isinstance(count, int) else 0
        return 0

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
            raise SessionFormatError(f"{self.path}: event {i} is corrupt: {exc}") from None

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
        for first, lines in self.segments(start, stop):
            bad: list[tuple[int, str]] = []
            yield from decode_events(lines, first, bad)
            for i, why in bad:
                self._warn(f"event {i} is corrupt and was skipped: {why}")

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
                    self._warn(f"event {at} is corrupt and was skipped: {exc}")
                    yield ()
                at += 1
        while at < stop:
            at += 1
            yield ()

    def ts_at(self, i: int) -> str:
        head = self.line(i)[: len(_TS_PREFIX) + _TS_LEN]
        if head.startswith(_TS_PREFIX) and len(head) == len(_TS_PREFIX) + _TS_LEN:
            return head[len(_TS_PREFIX) :].decode("ascii", "replace")
        return format_ts(self.event(i).ts)

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

    def markers(self, kinds: frozenset[str] = SEEKABLE_KINDS) -> list[int]:
        """Indices of events worth seeking to (found at open, kept in the index)."""
        if kinds == SEEKABLE_KINDS:
            if self._markers is None:
                self._markers = self._find_markers()
                fp, self._fp = self._fp, None
                if fp is not None:
                    session_index.save(self.path, fp, self._segments, self._markers,
                                       self._index_warnings, self._header_line, self._end)
            return list(self._markers)
        return self._find_markers(kinds)

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
