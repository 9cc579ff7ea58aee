"""The app's replay controls: play and pause, step, speed, markers, and seeks by position or
by time.

A mixin of ConsoleApp (console/tui/app.py), apart from it because they act only on a replayed
session (the source's Replayer) and a seek rebuilds the state off the UI loop (from the
checkpoints, console/tui/checkpoints.py), while the app itself is the event pump and the screen
switching. Textual finds the `action_*` and `on_*` methods through the app's class.
"""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rich.text import Text

from console.sessions.replay import SPEEDS
from console.tui.box_actions import AppBase
from console.tui.checkpoints import StateCheckpoints
from console.tui.controller import ReplaySource, Source
from console.tui.dialogs import SeekScreen
from console.tui.messages import MarkerChosen
from console.tui.model import ConsoleState
from remote.spine.events import Event


class ReplayControls(AppBase):
    """What ConsoleApp's replay controls use of the app (declared for the type checker)."""

    if TYPE_CHECKING:
        source: Source
        state: ConsoleState
        checkpoints: StateCheckpoints | None
        seeking: int
        _pending: deque[Event]

        def drain(self) -> None: ...

        def refresh_all(self) -> None: ...

        def _start_source(self) -> None: ...

        def _update_chrome(self) -> None: ...

    @property
    def replayer(self) -> Any:
        return self.source.replayer if isinstance(self.source, ReplaySource) else None

    def replay_status(self) -> str:
        r = self.replayer
        if r is None:
            return ""
        speed = "max" if r.speed == float("inf") else f"{r.speed:g}x"
        state = "ended" if r.finished and r.position >= len(r.reader) else ("paused" if r.paused else speed)
        return f"{state} {r.position}/{len(r.reader)}"

    def _replay_text(self) -> Text:
        r = self.replayer
        text = Text()
        if r is None:
            return text
        reader = r.reader
        text.append(f"{reader.path.name}", style="bold")
        text.append(f"  started {reader.header.started:%Y-%m-%d %H:%M:%S} UTC  ")
        pos = min(r.position, len(reader)) - 1
        if pos >= 0:
            text.append(f"at {reader.ts_at(pos)[11:23]}  ")
        # Positions count records, as the marker table's # column and seeks do; a log block
        # recorded as one job.lines record is one position holding up to 512 lines, so the
        # events the screen has folded so far are shown beside it (exact: the state counts
        # them). The session's total of events is not known without expanding every record.
        text.append(f"record {r.position}/{len(reader)} ({self.state.events_seen:,} events)  ")
        speed = "max" if r.speed == float("inf") else f"{r.speed:g}x"
        text.append(f"speed {speed}  ", style="bold")
        if r.position >= len(reader):
            text.append("at the end", style="bold")
        else:
            text.append("paused" if r.paused else "playing", style="yellow" if r.paused else "green")
        for w in reader.warnings[-2:]:
            text.append(f"\nwarning: {w}", style="yellow")
        return text

    def action_replay_toggle(self) -> None:
        r = self.replayer
        if r is None:
            return
        if r.position >= len(r.reader):
            self.notify("at the end: 0 restarts, [ goes back a marker", title="replay", timeout=3)
            return
        r.toggle()
        self._start_source()
        self._update_chrome()

    def action_replay_step(self) -> None:
        if (r := self.replayer) is not None:
            r.pause()
            r.step()
            self.drain()

    def action_replay_speed(self) -> None:
        if (r := self.replayer) is not None:
            i = SPEEDS.index(r.speed) if r.speed in SPEEDS else -1
            r.set_speed(SPEEDS[(i + 1) % len(SPEEDS)])
            self._update_chrome()

    def seek(self, index: int) -> None:
        """Jump to event `index`. The state there is rebuilt by folding the events before it, in
        a thread (a long session takes a while to fold), with the replay held meanwhile; the
        new state replaces the old one in one step when it is complete."""
        r = self.replayer
        if r is None:
            return
        was_playing = not r.paused and r.position < len(r.reader)  # the end: wait for space
        r.pause()
        r.seek_index(index)
        self._pending.clear()
        self.seeking += 1
        position = r.position
        names = self.source.host_names()

        def fold() -> ConsoleState:
            if self.checkpoints is not None:
                return self.checkpoints.state_at(position)
            state = ConsoleState(names)
            state.apply_all(r.reader.events(0, position))
            return state

        async def rebuild() -> None:
            try:
                state = await asyncio.to_thread(fold)
            finally:
                self.seeking -= 1
            if r.position != position:
                return  # a later seek superseded this one
            self._pending.clear()
            self.state = state
            self.refresh_all()
            self._start_source()
            if was_playing:
                r.play()

        self.run_worker(rebuild(), name="seek", group="seek", exit_on_error=False)

    def action_replay_marker(self, direction: int) -> None:
        r = self.replayer
        if r is None:
            return
        target = r.next_marker() if direction > 0 else r.previous_marker()
        if direction > 0 and target is not None and target < r.position:
            target = None
        if target is None:
            self.notify("no more markers", timeout=2)
            return
        self.seek(target + 1)  # land just after the marker event, so its effect is visible

    def on_marker_chosen(self, message: MarkerChosen) -> None:
        self.seek(message.index + 1)

    def action_replay_restart(self) -> None:
        self.seek(0)

    def action_replay_seek(self) -> None:
        if self.replayer is None:
            return

        def chosen(value: str | None) -> None:
            if value:
                try:
                    when = self.parse_seek(value)
                except ValueError as exc:
                    self.notify(str(exc), severity="error")
                    return
                self.seek(self.replayer.reader.index_at_time(when))

        self.push_screen(SeekScreen(), chosen)

    def parse_seek(self, value: str) -> datetime:
        reader = self.replayer.reader
        start = reader.time_of(0) if len(reader) else reader.header.started
        if value.startswith("+"):
            try:
                return start + timedelta(seconds=float(value[1:]))
            except ValueError:
                raise ValueError(f"not a number of seconds: {value!r}") from None
        try:
            t = datetime.strptime(value, "%H:%M:%S").time()
        except ValueError:
            raise ValueError(f"not a time: {value!r} (use HH:MM:SS or +SECONDS)") from None
        return datetime.combine(start.date(), t, tzinfo=UTC)
