"""What the console knows about each host, folded from the event stream. No Textual here.

The TUI never asks the box anything directly: every screen renders this state, and this state
is only ever changed by `ConsoleState.apply(event)`. That is what makes a replay look exactly
like a live session, and what lets a seek rebuild the picture by folding the events before the
new position. Reducers mutate in place and report which domains changed, so the app refreshes
only the views that care (a job printing 10,000 lines/s must not redraw the GPU charts).
Payloads come from other machines: every field is read defensively, a malformed payload becomes
a note on the host, never an exception.
Apart from the reducers (console/tui/reducers.py, remote/spine/stage_life.py) and the host
state they fill (console/tui/host_state.py): this is the one entry point, ConsoleState, and the
names the screens import with it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from datetime import datetime

from console.tui.host_state import (
    ALLREDUCE,
    BENCH,
    CONNECTION,
    HISTORY,
    JOBS,
    LOG,
    MARKERS,
    NOTES,
    NOTES_DOMAIN,
    PATCH,
    PROBES,
    STAGES,
    STATS,
    HostState,
    JobState,
    Note,
    StageState,
    stage_order,
)
from console.tui.reducers import REDUCERS, job_of, note, note_of
from console.tui.shown import shown_event
from pipeline.progress import PREFIX as RECORD_PREFIX
from remote.spine import events as ev
from remote.spine.events import Event

# What the screens import from here with ConsoleState (console/tui/widgets/).
__all__ = ["ALLREDUCE", "BENCH", "CONNECTION", "HISTORY", "JOBS", "LOG", "MARKERS", "NOTES_DOMAIN",
           "PATCH", "PROBES", "STAGES", "STATS", "ConsoleState", "HostState",
           "JobState", "Note", "StageState", "stage_order"]


class ConsoleState:
    """All hosts' state plus the session-wide bits (markers, replay position)."""

    def __init__(self, hosts: Iterable[str] = ()) -> None:
        self.hosts: dict[str, HostState] = {}
        self.markers: list[tuple[datetime, str, str]] = []  # (ts, host, label)
        self.notes: deque[Note] = deque(maxlen=NOTES)  # messages not about one host
        self.events_seen = 0
        self.last_ts: datetime | None = None
        for name in hosts:
            self.host(name)

    def host(self, name: str) -> HostState:
        if name not in self.hosts:
            self.hosts[name] = HostState(name)
        return self.hosts[name]

    def apply(self, event: Event) -> set[str]:
        """Fold one event in; returns the domains that changed."""
        self.events_seen += 1
        self.last_ts = event.ts
        if event.kind != ev.JOB_LINE:  # job lines: the log views sanitise what they draw
            event = shown_event(event)
        if event.kind == ev.MARKER:
            label = str(event.payload.get("label") or event.payload.get("summary") or "marker")
            self.markers.append((event.ts, event.host, label))
            return {MARKERS}
        reducer = REDUCERS.get(event.kind)
        if reducer is None:
            return set()
        if not event.host and reducer is note:
            self.notes.append(note_of(event))
            return {NOTES_DOMAIN}
        host = self.host(event.host or "local")
        host.last_event = event.ts
        try:
            return reducer(host, event)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            host.notes.append(Note(event.ts, "error", f"malformed {event.kind} payload: {exc}"))
            return {NOTES_DOMAIN}

    def apply_all(self, events: Iterable[Event]) -> set[str]:
        changed: set[str] = set()
        for e in events:
            changed |= self.apply(e)
        return changed

    def apply_batch(self, events: Sequence[Event]) -> set[str]:
        """Events published together (a session record's): a log block (JobLines) folded in
        one go, its job looked up once and its lines appended to the tails (apply() per line
        was ~15 us, most of a replay's background fold); anything else event by event. The
        same state either way (tests/console/tui/test_replay_checkpoints.py compares them)."""
        if not isinstance(events, ev.JobLines) or not events:
            return self.apply_all(events)
        first, last = events[0], events[-1]
        self.events_seen += len(events)
        self.last_ts = last.ts
        host = self.host(first.host or "local")
        host.last_event = last.ts
        job = job_of(host, first.payload)
        append, text_append = job.tail.append, job.text.append
        for text, offset in zip(events.texts, events.offsets, strict=True):
            append(text, offset)
            if not text.startswith(RECORD_PREFIX):
                text_append(text)
        return {LOG}
