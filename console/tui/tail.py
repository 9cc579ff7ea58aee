"""The log tail engine behind the Pipeline screen's log view, kept apart from the widget.

A job can print 10,000 lines a second for hours. The engine keeps a bounded window of lines in
memory (older ones are counted, not kept: the box keeps the full log), and answers "which lines
are visible for this scroll position" in O(height), so the widget renders only what is on screen.
It also remembers the byte offset after the last line, which is what a reattaching tail resumes
from. No Textual here: it is unit-tested on its own and benchmarked without a terminal.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import islice

DEFAULT_MAX_LINES = 100_000


class LogTail:
    def __init__(self, max_lines: int = DEFAULT_MAX_LINES) -> None:
        if max_lines <= 0:
            raise ValueError("max_lines must be positive")
        self.max_lines = max_lines
        self._lines: deque[str] = deque(maxlen=max_lines)
        self.dropped = 0  # lines that fell off the front of the window
        self.offset = 0  # byte offset just after the last line, as the box reported it
        self.longest = 0  # widest line seen (for horizontal scrolling)
        self.version = 0  # bumps on every change, so a widget can skip redundant refreshes

    def __len__(self) -> int:
        return len(self._lines)

    def __deepcopy__(self, memo: dict[int, object]) -> LogTail:
        """A replay's state checkpoints copy tails of up to max_lines lines: the lines are
        immutable strings, so one C-level copy of the window replaces a per-line deepcopy."""
        new = LogTail.__new__(LogTail)
        new.__dict__.update(self.__dict__)
        new._lines = self._lines.copy()
        memo[id(self)] = new
        return new

    def newest(self, count: int) -> list[str]:
        """The last `count` lines of the window, oldest first (O(count), from the deque's end)."""
        return list(islice(reversed(self._lines), max(count, 0)))[::-1]

    def emptied(self) -> LogTail:
        """This tail's counters with an empty window: what a light state checkpoint keeps,
        the lines being kept once for all checkpoints (console/tui/checkpoints.py)."""
        new = LogTail.__new__(LogTail)
        new.__dict__.update(self.__dict__)
        new._lines = deque(maxlen=self.max_lines)
        return new

    def refill(self, lines: Sequence[str]) -> None:
        """Put back the window an emptied() copy left out (the counters are already right)."""
        self._lines = deque(lines, maxlen=self.max_lines)

    @property
    def total(self) -> int:
        """Lines ever appended, including the ones dropped from memory."""
        return self.dropped + len(self._lines)

    def append(self, text: str, offset: int | None = None) -> None:
        text = text.rstrip("\n")
        if len(self._lines) == self.max_lines:
            self.dropped += 1
        self._lines.append(text)
        if len(text) > self.longest:
            self.longest = len(text)
        if offset is not None:
            self.offset = offset
        self.version += 1

    def line(self, index: int) -> str:
        """Line `index` of the in-memory window (0 is the oldest kept)."""
        return self._lines[index]

    def window(self, start: int, height: int) -> list[str]:
        """The lines visible when the view's top row is `start` (clamped to the window)."""
        n = len(self._lines)
        start = max(0, min(start, n))
        stop = min(n, start + max(height, 0))
        lines = self._lines
        # deque indexing is O(distance from the nearer end); visible windows sit near the end
        # when following, and a bounded deque keeps the worst case bounded too.
        return [lines[i] for i in range(start, stop)]

    def tail_start(self, height: int) -> int:
        """Top row that shows the last `height` lines (what "follow" scrolls to)."""
        return max(0, len(self._lines) - height)
