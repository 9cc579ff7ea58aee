"""Recording a bus: every event published, in order, into a SessionWriter.

Apart from the writer (console/sessions/writer.py) because this is the asyncio side: the events
are encoded on the publishing thread and written on a thread of their own, and a failure stops
recording without stopping the work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from console.errors import SessionWriteError
from console.sessions.write_behind import WriteBehind
from console.sessions.writer import Encoded, SessionWriter
from remote.spine.bus import EventBus
from remote.spine.events import Event


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
