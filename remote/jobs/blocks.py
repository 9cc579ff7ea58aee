"""A block of a job's log as the tail receives it: its lines with the offset after each, the
stage records among them published as stage events right after their line, and the helper's
END trailer that closes a stream."""

from __future__ import annotations

import json
from datetime import datetime
from itertools import accumulate
from typing import Any

from remote.jobs import stage_records
from remote.spine import events as ev
from remote.spine.bus import EventBus

RECORD = stage_records.PREFIX.encode()


def stage_events(host: str, run_id: str, name: str, texts: list[str], ends: list[int],
                 ts: datetime) -> dict[int, ev.Event]:
    """Each stage record's event among the lines, by the log offset just after its line (a
    malformed record is one console.warning in its place: the tail goes on)."""
    found: dict[int, ev.Event] = {}
    for text, end in zip(texts, ends, strict=True):
        if text.startswith(stage_records.PREFIX):
            kind_payload = stage_records.record_event(text, run_id, name, end)
            if kind_payload is not None:  # checked already: its schema is not run twice
                found[end] = ev.Event(kind_payload[0], host, kind_payload[1], ts)
    return found


def publish_with_stages(bus: EventBus, host: str, run_id: str, name: str, texts: list[str],
                        ends: list[int], ts: datetime, found: dict[int, ev.Event]) -> None:
    """A block holding stage records: each record's event (`found`) right after its line, so
    a tail of any job (live, reattached, replayed) shows the same stage progress."""
    start = 0
    for j, end in enumerate(ends):
        if end not in found:
            continue
        bus.publish_many(ev.JobLines(host, run_id, name, texts[start : j + 1],
                                     ends[start : j + 1], ts))
        start = j + 1
        bus.publish(found[end])
    if start < len(texts):
        bus.publish_many(ev.JobLines(host, run_id, name, texts[start:], ends[start:], ts))


def split_lines(block: bytes, start: int) -> tuple[list[str], list[int]]:
    """The lines of a block ending in a newline, and the log offset just after each one (the
    block begins at offset `start`)."""
    pieces: list[str] | list[bytes]
    if block.isascii():  # the common case: characters are bytes, decode once
        texts = pieces = block.decode("ascii").split("\n")
        texts.pop()  # after the final newline
    else:
        pieces = block.split(b"\n")
        pieces.pop()
        texts = [raw.decode("utf-8", "replace") for raw in pieces]
    ends = list(accumulate(map(_PLUS_NEWLINE, map(len, pieces)), initial=start))
    del ends[0]
    return texts, ends


_PLUS_NEWLINE = (1).__add__


def trailer(control: bytes) -> dict[str, Any] | None:
    for raw in control.decode("utf-8", "replace").splitlines():
        if raw.startswith("END "):
            try:
                data = json.loads(raw[4:])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None
