"""Session files: the durable record of everything a console session saw and did.

JSON lines: a header, then one event per line, flushed per event so a crash loses at most the
line being written. Optionally zstd-compressed (`.jsonl.zst`), flushed per event as a zstd block.
Reading builds an index of byte offsets on open (no JSON parsing), so a million-event file opens
in well under a second and seeks by event number or by time without reading everything.
"""

from __future__ import annotations

import bisect
import errno
import json
import mmap
import os
import tempfile
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import platformdirs

from console import __version__
from remote.bus import EventBus
from remote.errors import ConsoleError, UsageError
from remote.events import SEEKABLE_KINDS, Event, JobLines, format_ts, parse_ts, utc_now
from remote.hosts import APP_NAME

FORMAT = "eagle3-console-session"
VERSION = 1
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_TS_PREFIX = b'{"ts":"'
_TS_LEN = 24


class SessionFormatError(UsageError):
    """Not a session file (or an unsupported version): a one-line message, exit code 2."""


class SessionWriteError(ConsoleError):
    pass


def default_session_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME)) / "sessions"


def default_session_path(host: str, *, compress: bool = False) -> Path:
    stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in host) or "session"
    return default_session_dir() / f"{stamp}-{safe}.jsonl{'.zst' if compress else ''}"


class SessionWriter:
    def __init__(
        self,
        path: str | os.PathLike[str],
        hosts: Sequence[str] = (),
        *,
        started: datetime | None = None,
        compress: bool | None = None,
    ) -> None:
        self.path = Path(path)
        self.compress = self.path.name.endswith(".zst") if compress is None else compress
        self.count = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Unbuffered: each event goes to the kernel in one write, so a SIGKILL loses at most the
        # line being written, and a failed write (disk full) leaves nothing queued to retry.
        self._raw: IO[bytes] = open(self.path, "xb", buffering=0)  # never clobber a session
        self._zw: Any = None
        if self.compress:
            import zstandard

            self._zw = zstandard.ZstdCompressor(level=3).stream_writer(self._raw, closefd=False)
        header = {
            "format": FORMAT,
            "version": VERSION,
            "started": format_ts(started or utc_now()),
            "hosts": list(hosts),
            "console_version": __version__,
        }
        self._write_line(json.dumps(header, separators=(",", ":")))

    def _write_line(self, line: str) -> None:
        self._write_bytes(line.encode("utf-8") + b"\n")

    def _write_bytes(self, data: bytes) -> None:
        try:
            if self._zw is not None:
                import zstandard

                self._zw.write(data)
                self._zw.flush(zstandard.FLUSH_BLOCK)
            else:
                view = memoryview(data)
                while view:
                    view = view[self._raw.write(view) or 0 :]
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise SessionWriteError(f"disk full while recording {self.path}") from exc
            raise SessionWriteError(f"cannot write session {self.path}: {exc}") from exc

    def write(self, event: Event) -> None:
        self._write_line(event.to_json())
        self.count += 1

    def write_many(self, events: Sequence[Event]) -> None:
        """Events that arrived together, in one write: a SIGKILL loses at most this batch (up to
        remote.jobs.BATCH_LINES lines of a block just received), never an earlier one."""
        if isinstance(events, JobLines):  # a log block: its shared fields encoded once
            self._write_bytes(events.to_jsonl().encode("utf-8"))
            self.count += len(events)
            return
        if len(events) == 1:
            self.write(events[0])
            return
        self._write_bytes("".join([e.to_json() + "\n" for e in events]).encode("utf-8"))
        self.count += len(events)

    def close(self) -> None:
        if self._raw.closed:
            return
        try:
            if self._zw is not None:
                self._zw.close()
        except OSError:
            pass  # disk full at the frame end: every flushed event is already on disk
        finally:
            self._raw.close()

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Recorder:
    """Bus consumer that writes every event. A write failure (disk full) stops recording and is
    reported once; the work itself goes on, since the box keeps its own truth."""

    writer: SessionWriter
    error: str | None = None
    _detach: Any = field(default=None, repr=False)

    def attach(self, bus: EventBus) -> Recorder:
        self._detach = bus.add_batch_callback(self._on_events)
        return self

    def _on_events(self, events: Sequence[Event]) -> None:
        if self.error is not None:
            return
        try:
            self.writer.write_many(events)
        except SessionWriteError as exc:
            self.error = str(exc)

    def close(self) -> None:
        if self._detach:
            self._detach()
        self.writer.close()


@dataclass(frozen=True, slots=True)
class SessionHeader:
    started: datetime
    hosts: list[str]
    console_version: str
    version: int


def _zstd_ends_mid_block(fh: IO[bytes]) -> bool:
    """Walk the frame and block headers (RFC 8878) to tell a file that ends on a block boundary
    (a recorder that flushed every event) from one cut mid-block: the decompressor itself
    silently returns what it could decode in both cases."""
    data = fh.read()
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] != ZSTD_MAGIC:
            return True
        if pos + 5 > len(data):
            return True
        fhd = data[pos + 4]
        fcs_flag, single, checksum, dict_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
        pos += 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
        pos += (1 if single else 0, 2, 4, 8)[fcs_flag]
        while True:
            if pos == len(data):
                return False  # unclosed frame ending on a block boundary: nothing lost
            if pos + 3 > len(data):
                return True
            header = int.from_bytes(data[pos : pos + 3], "little")
            last, btype, bsize = header & 1, (header >> 1) & 3, header >> 3
            pos += 3 + (1 if btype == 1 else bsize)
            if pos > len(data):
                return True
            if last:
                pos += 4 if checksum else 0
                if pos > len(data):
                    return True
                break
    return False


class SessionReader:
    """Random access to a session file. `.zst` files are decompressed once into a temp file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.warnings: list[str] = []
        self._tmp: IO[bytes] | None = None
        try:
            fh = open(self.path, "rb")
        except OSError as exc:
            raise SessionFormatError(f"{self.path}: cannot open: {exc.strerror or exc}") from None
        with fh:
            magic = fh.read(4)
            fh.seek(0)
            if magic == ZSTD_MAGIC:
                self._tmp = self._decompress(fh)
                source: IO[bytes] = self._tmp
            else:
                source = open(self.path, "rb")
        self._fh = source
        size = os.fstat(source.fileno()).st_size
        if size == 0:
            self.close()
            raise SessionFormatError(f"{self.path}: empty file, not a console session")
        self._mm = mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ)
        self.header = self._read_header()
        self._offsets, self._end = self._build_index()

    # -- opening -------------------------------------------------------------------------------
    def _decompress(self, fh: IO[bytes]) -> IO[bytes]:
        import zstandard

        if _zstd_ends_mid_block(fh):
            self.warnings.append("compressed stream is cut mid-block (recorder killed while "
                                 "writing); the event being written is lost")
        fh.seek(0)
        tmp = tempfile.TemporaryFile()
        reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
        try:
            while chunk := reader.read(1 << 20):
                tmp.write(chunk)
        except zstandard.ZstdError as exc:
            # A recorder killed mid-write leaves a truncated frame: keep what decompressed.
            self.warnings.append(f"compressed stream ends early ({exc}); reading what is complete")
        tmp.flush()
        if tmp.tell() == 0 and self.warnings:
            raise SessionFormatError(f"{self.path}: corrupt zstd data, not a readable session")
        tmp.seek(0)
        return tmp

    def _read_header(self) -> SessionHeader:
        end = self._mm.find(b"\n")
        first = self._mm[: end if end >= 0 else min(len(self._mm), 4096)]
        not_session = f"{self.path}: not a console session file"
        try:
            data = json.loads(first)
        except (UnicodeDecodeError, ValueError):
            raise SessionFormatError(f"{not_session} (first line is not a JSON header)") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise SessionFormatError(f"{not_session} (no '{FORMAT}' header)")
        if data.get("version") != VERSION:
            raise SessionFormatError(
                f"{self.path}: session format version {data.get('version')} is not supported "
                f"(this console reads version {VERSION})"
            )
        if end < 0:
            raise SessionFormatError(f"{self.path}: header line is incomplete")
        try:
            started = parse_ts(data["started"])
        except (KeyError, ValueError, TypeError):
            raise SessionFormatError(f"{self.path}: header has no valid 'started' time") from None
        return SessionHeader(
            started=started,
            hosts=list(data.get("hosts") or []),
            console_version=str(data.get("console_version", "?")),
            version=VERSION,
        )

    def _build_index(self) -> tuple[array[int], int]:
        mm = self._mm
        offsets: array[int] = array("q")
        append = offsets.append
        find = mm.find
        pos = find(b"\n") + 1
        size = len(mm)
        while pos < size:
            nl = find(b"\n", pos)
            if nl < 0:
                self.warnings.append(
                    f"last line is incomplete ({size - pos} bytes, cut mid-write); ignored"
                )
                return offsets, pos
            append(pos)
            pos = nl + 1
        return offsets, size

    # -- access --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._offsets)

    def _line(self, i: int) -> bytes:
        start = self._offsets[i]
        end = self._offsets[i + 1] if i + 1 < len(self._offsets) else self._end
        return self._mm[start:end]

    def event(self, i: int) -> Event:
        if i < 0:
            i += len(self)
        try:
            return Event.from_json(self._line(i))
        except (ValueError, UnicodeDecodeError) as exc:
            raise SessionFormatError(f"{self.path}: event {i} is corrupt: {exc}") from None

    def events(self, start: int = 0, stop: int | None = None) -> Iterator[Event]:
        """Complete events in order; a corrupt line in the middle is reported and skipped."""
        stop = len(self) if stop is None else min(stop, len(self))
        for i in range(max(start, 0), stop):
            try:
                yield Event.from_json(self._line(i))
            except (ValueError, UnicodeDecodeError) as exc:
                self.warnings.append(f"event {i} is corrupt and was skipped: {exc}")

    def ts_at(self, i: int) -> str:
        start = self._offsets[i]
        head = self._mm[start : start + len(_TS_PREFIX) + _TS_LEN]
        if head.startswith(_TS_PREFIX):
            return head[len(_TS_PREFIX) :].decode("ascii", "replace")
        return format_ts(self.event(i).ts)

    def time_of(self, i: int) -> datetime:
        return parse_ts(self.ts_at(i))

    def index_at_time(self, when: datetime) -> int:
        """First event at or after `when` (events are recorded in time order)."""
        key = format_ts(when)
        return bisect.bisect_left(range(len(self)), key, key=self.ts_at)

    def markers(self, kinds: frozenset[str] = SEEKABLE_KINDS) -> list[int]:
        """Indices of events worth seeking to; found by a byte scan, not by parsing every line."""
        needles = [f'"kind":{json.dumps(k)}'.encode() for k in kinds]
        found: list[int] = []
        for needle in needles:
            pos = self._mm.find(needle)
            while pos >= 0 and pos < self._end:
                i = bisect.bisect_right(self._offsets, pos) - 1
                # A payload may hold a nested "kind" key: confirm on the parsed event.
                if i >= 0 and i not in found and self._kind_of(i) in kinds:
                    found.append(i)
                pos = self._mm.find(needle, pos + 1)
        return sorted(set(found))

    def _kind_of(self, i: int) -> str | None:
        try:
            return self.event(i).kind
        except SessionFormatError:
            return None

    def close(self) -> None:
        mm = getattr(self, "_mm", None)
        if mm is not None:
            mm.close()
        for fh in (getattr(self, "_fh", None), self._tmp):
            if fh is not None and not fh.closed:
                fh.close()

    def __enter__(self) -> SessionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
