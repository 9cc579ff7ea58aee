"""Replays a session file into an event bus, with the controls an operator needs.

The replayer is the only difference between a live session and a replay: consumers (TUI,
printer) subscribe to the same bus either way.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from datetime import datetime

from console.errors import SessionFormatError
from console.sessions.reader import SessionReader
from remote.link import aio
from remote.spine.bus import EventBus
from remote.spine.events import Event

SPEEDS = (1.0, 10.0, float("inf"))
# Idle gaps longer than this are shortened, so an overnight pause does not stall a replay at 1x.
MAX_GAP_S = 5.0
YIELD_EVERY = 256  # events published between two yields to the event loop, at most (plus a block)


class Replayer:
    def __init__(self, reader: SessionReader, bus: EventBus, *, speed: float = 1.0) -> None:
        self.reader = reader
        self.bus = bus
        self.speed = speed
        self.position = 0  # index of the next record to publish (reader positions)
        self.published = 0  # events published (a log block's record publishes its lines)
        self._playing = asyncio.Event()
        self._moved = asyncio.Event()
        self.finished = False
        self._markers: list[int] | None = None  # read once: `[`/`]` bisect it

    def markers(self) -> list[int]:
        if self._markers is None:
            self._markers = self.reader.markers()
        return self._markers

    # -- controls ------------------------------------------------------------------------------
    @property
    def paused(self) -> bool:
        return not self._playing.is_set()

    def play(self) -> None:
        self._playing.set()

    def pause(self) -> None:
        self._playing.clear()

    def toggle(self) -> None:
        self.pause() if not self.paused else self.play()

    def set_speed(self, speed: float) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = speed
        self._moved.set()

    def step(self) -> Event | None:
        """Publish exactly the next record (used while paused): one event, or a log block's
        lines together, as the live tail published them. Returns the last event published."""
        while self.position < len(self.reader):
            i = self.position
            self.position += 1
            try:
                events = self.reader.record(i)
            except SessionFormatError as exc:  # a corrupt record: reported, skipped, not raised
                self.reader.warn(str(exc))
                continue
            if len(events) == 1:
                self.bus.publish(events[0])
            else:
                self.bus.publish_many(events)
            self.published += len(events)
            return events[-1]
        self.finished = True
        return None

    def seek_index(self, index: int) -> None:
        """Jump; events between the old and new position are not replayed (consumers that need
        the state at the new position rebuild it from `state_events`)."""
        self.position = max(0, min(index, len(self.reader)))
        self.finished = self.position >= len(self.reader)
        self._moved.set()

    def next_marker(self) -> int | None:
        markers = self.markers()
        k = bisect_left(markers, self.position)
        return markers[k] if k < len(markers) else None

    def previous_marker(self) -> int | None:
        markers = self.markers()
        k = bisect_left(markers, self.position - 1)
        return markers[k - 1] if k else None

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Publish events paced by their timestamps / speed until the end of the file."""
        previous: datetime | None = None
        yielded_at = self.published
        while self.position < len(self.reader):
            await self._playing.wait()
            if self.position >= len(self.reader):
                break
            try:
                ts: datetime | None = self.reader.time_of(self.position)
            except (SessionFormatError, ValueError, OverflowError):
                # A line without a readable timestamp (garbage, bytes that are not UTF-8, a
                # NUL line, a month 13) has no time of its own: it is not waited for, and
                # step() below reports it and moves on. Asking for its time outside step()'s
                # damage handling stalled the TUI's replay at that line (issue 48 row 4).
                ts = None
            if ts is not None and previous is not None and self.speed != float("inf"):
                gap = min(max((ts - previous).total_seconds(), 0.0), MAX_GAP_S) / self.speed
                if gap > 0:
                    self._moved.clear()
                    try:
                        await aio.wait_for(self._moved.wait(), gap)
                        previous = None  # seek or speed change: re-anchor timing
                        continue
                    except TimeoutError:
                        yielded_at = self.published
                if not self._playing.is_set():
                    continue
            if self.published - yielded_at >= YIELD_EVERY:
                # Records due at once (max speed, or many with one timestamp at any speed: an
                # old recording's 500 log lines of a second) would otherwise be published in
                # one run of this loop, every consumer's work on them included, while a key
                # waits behind it: 500 lines took 5-17 ms of the UI loop at 1x.
                yielded_at = self.published
                await asyncio.sleep(0)
            previous = ts if ts is not None else previous
            self.step()
        self.finished = True
