"""Writing a session file: the durable record of everything a console session saw and did.

A plain file is written per event (or per batch) so a crash loses at most the line being
written, plus, for a Recorder, the batches its writer thread still held
(console/sessions/write_behind.py: none while the disk keeps up). A `.jsonl.zst` file is one
zstd frame per ~1 MiB of events (checksummed, so damage is found, and a unit that can be read on
its own), with the pending data flushed as a zstd block at least every FLUSH_S seconds by a
timer, so a kill -9 of the recorder loses at most the last second of events and the file stays
within a few percent of `zstd -3` of the same lines (a block per event made it 6.5x larger).
Apart from the reader (console/sessions/reader.py) because a recording console never reads and
a replay never writes; the bus side of recording is console/sessions/recorder.py.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import platformdirs

from console import __version__
from console.errors import SessionPathError, SessionWriteError
from console.sessions.header import FORMAT, VERSION
from console.sessions.live_index import LiveIndexWriter
from console.sessions.writer_index import WriterIndex
from remote.link.hosts import APP_NAME
from remote.spine.events import SEEKABLE_KINDS, Event, JobLines, format_ts, utc_now

# Compressed sessions: a frame is closed after this many bytes or events (the unit a reader
# decompresses to reach one event), and pending data is flushed at least every FLUSH_S seconds.
FRAME_BYTES = 1 << 20
FRAME_EVENTS = 20_000
FLUSH_S = 0.75
_TIMER_TICK_S = 0.2


def default_session_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME)) / "sessions"


def default_session_path(host: str) -> Path:
    """`<second>-<host>-<pid>.jsonl`: the process id keeps two commands for one host started in
    the same second apart; a number is added when this process already used the name."""
    stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in host) or "session"
    base = default_session_dir() / f"{stamp}-{safe}-{os.getpid()}"
    path = base.with_name(base.name + ".jsonl")
    n = 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}.jsonl")
    return path


def _make_private_dirs(directory: Path) -> None:
    """Create missing directories 0700: sessions hold command lines, paths and log text
    (mkdir(parents=True) makes the parents with the default mode), outermost first."""
    for d in reversed((directory, *directory.parents)):
        if not d.exists():
            with suppress(FileExistsError):
                d.mkdir(mode=0o700)


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
