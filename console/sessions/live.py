"""The one place a live session is put together: the event bus, its recorder, and the printer
(headless commands) or the TUI (which subscribes to the same bus).

Every way of running the console goes through `open_session`, so every session is recorded the
same way (the TUI's too) and replaying it feeds the same events to the same consumers: what the
operator saw is what the replay shows.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from console.printer import Printer
from console.sessions.recorder import Recorder
from console.sessions.writer import SessionWriter, default_session_path
from remote.spine.bus import EventBus
from remote.spine.redact import Redactor


@dataclass
class LiveSession:
    bus: EventBus
    recorder: Recorder | None = None

    def close(self, *, report: IO[str] | None = None, discard: bool = False) -> None:
        """Stop recording (the file is complete) and say where it is, or why it stopped.
        `discard`: the command ended on bad input before doing anything; its file and index go."""
        report = report or sys.stderr
        if self.recorder is not None:
            self._count_redactions()
            self.recorder.close()
            if discard:
                from console.sessions.index import index_path

                path = self.recorder.writer.path
                for p in (path, index_path(path)):
                    p.unlink(missing_ok=True)
            elif self.recorder.error:
                print(f"warning: session recording stopped: {self.recorder.error}", file=report)
            else:
                print(f"session recorded: {self.recorder.writer.path}", file=report)
        self.bus.close()


    def _count_redactions(self) -> None:
        """The session's last record: how many secrets were masked, by kind (none: no record)."""
        r = self.bus.redactor
        if r is None or not r.total or self.bus.closed:
            return
        from remote.spine import event_types as et

        kinds = ", ".join(f"{k} {n}" for k, n in sorted(r.counts.items()))
        self.bus.post(et.SessionRedactions(
            count=r.total, kinds=dict(r.counts),
            summary=f"{r.total} secret(s) masked in this session ({kinds}); --no-redact keeps them"))


def open_session(
    hosts: Sequence[str] = (),
    *,
    record: bool = True,
    path: str | Path | None = None,
    printer: Printer | None = None,
    redact: bool = True,
) -> LiveSession:
    """A bus with a recorder (unless record is False) and, for headless commands, a printer.

    The recorder is attached first: it sees every event before any other consumer runs.
    `redact`: secret shapes are masked on the bus, before any consumer (remote/spine/redact.py);
    the header says whether they were."""
    bus = EventBus(redactor=Redactor() if redact else None)
    recorder = None
    if record:
        names = list(hosts)
        target = Path(path) if path else default_session_path(names[0] if names else "console")
        recorder = Recorder(SessionWriter(target, names, redact=redact)).attach(bus)
    if printer is not None:
        bus.add_callback(printer)
    return LiveSession(bus, recorder)
