"""Finding the events worth seeking to (SEEKABLE_KINDS) in a session's raw bytes.

Apart from the reader (console/sessions/reader.py) because it is the one costly pass of a cold
open: the reader feeds it each segment's bytes while the scan holds them, and the index keeps
what it found (console/sessions/index.py).
"""

from __future__ import annotations

import re

from console.sessions.decode import event_kinds
from console.sessions.source import count_events
from remote.spine.events import SEEKABLE_KINDS

# `kind":"`, not `"kind":"`: the regex engine's literal-prefix search stops at every candidate
# first character, and `"` is every few bytes of JSON while `k` is rare.
_PATTERN = re.compile(b'kind":"(?:' + b"|".join(re.escape(k.encode())
                                                for k in sorted(SEEKABLE_KINDS)) + b')"')


class MarkerFinder:
    """Seekable events (SEEKABLE_KINDS) in segments' bytes: one regex pass per segment, each
    hit confirmed on its parsed line (a payload may hold a nested "kind" key)."""

    def __init__(self) -> None:
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
        for m in _PATTERN.finditer(data):
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
                if kind in SEEKABLE_KINDS:
                    self.found.add(i)

    def forget(self, index: int) -> None:
        self.found = {i for i in self.found if i < index}

    def result(self) -> list[int]:
        return sorted(self.found)
