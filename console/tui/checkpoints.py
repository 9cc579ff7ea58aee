"""The console state at any point of a replay without folding the session from its start.

A seek used to fold every event from 0 to the target (seconds for a 1M-event session). Here the
state is copied every `every` events while the session is folded once (in the background, when
the replay opens); a seek takes the nearest copy before the target (a bisect over the
checkpoint positions: O(log n)) and folds at most `every` events on top. The session reader's
offset index gives the target event itself in O(1).

What bounds `every` is memory, and nearly all of a state is its jobs' log windows (up to
100,000 lines each). So a checkpoint keeps no window: each tail's lines are kept once, in one
append-only list per tail shared by every checkpoint, and a checkpoint records where its window
ends in that list; the markers, which only grow, likewise. A copy is then a few KB,
checkpoints can sit 512 events apart, and a seek
folds at most 512 events (about 1/15 of what 128 full copies allowed at 1M events).
`shared_windows=False` keeps the full copies (128 at most), for the benchmark's comparison.
"""

from __future__ import annotations

import copy
import os
import threading
from bisect import bisect_right
from collections.abc import Iterable
from datetime import datetime

from console.sessions.reader import SessionReader
from console.tui.model import ConsoleState
from console.tui.tail import LogTail

# Light copies (windows shared): a few KB each, so many; a seek folds at most MIN_EVERY events
# up to MAX_CHECKPOINTS * MIN_EVERY (2M) events, then every grows with the session.
MAX_CHECKPOINTS = 4096
MIN_EVERY = 512
# Full copies hold each job's log window (up to 100,000 line references, ~0.8 MB): at most
# this many copies per session bounds the memory, at least this many events apart the copying.
FULL_MAX_CHECKPOINTS = 128
FULL_MIN_EVERY = 2048

# Folding this many lines of a log block (ConsoleState.apply_batch) costs about what folding
# one event does (measured by benchmarks/replay_fold.py: ~0.5-1 us a block line here against
# ~15-30 us an event through ConsoleState.apply).
BLOCK_LINES_PER_EVENT = 16

TailKey = tuple[str, str, str]  # host, run id, the JobState attribute holding the tail
# (tail, where its window ends in the tail's line list, how many lines the window holds)
Window = tuple[TailKey, int, int]


class StateCheckpoints:
    """Each of `build` and `state_at` reads the session through its own SessionReader: a reader
    is one file position, not to be shared between threads (the replay loop has its own)."""

    def __init__(self, path: str | os.PathLike[str], hosts: Iterable[str], *,
                 every: int | None = None, shared_windows: bool = True) -> None:
        self.path = path
        self.hosts = list(hosts)
        self.shared_windows = shared_windows
        self._min_every = MIN_EVERY if shared_windows else FULL_MIN_EVERY
        self._max_checkpoints = MAX_CHECKPOINTS if shared_windows else FULL_MAX_CHECKPOINTS
        self.every = every or self._min_every
        self._positions: list[int] = [0]
        # (the copy, its log windows, how many markers it had; -1: the copy holds them)
        self._states: list[tuple[ConsoleState, list[Window], int]] = [
            (ConsoleState(self.hosts), [], -1)]
        self._lines: dict[TailKey, list[str]] = {}  # every line each tail got, appended once
        self._markers: list[tuple[datetime, str, str]] = []  # the folded state's, append-only
        self._versions: dict[TailKey, int] = {}  # each tail's version when last copied
        self._lock = threading.Lock()  # the checkpoint lists
        self._reading = threading.Lock()  # the seek reader
        self._reader: SessionReader | None = None
        self.complete = False

    def build(self, stop: threading.Event | None = None) -> None:
        """Fold the whole session once, keeping a copy of the state every `every` events. Meant
        for a worker thread while `state_at` is used: copies are appended under a lock."""
        state = ConsoleState(self.hosts)
        self._markers = state.markers
        with SessionReader(self.path) as reader:
            n = len(reader)
            self.every = max(self.every, -(-n // self._max_checkpoints))
            since = 0  # fold cost since the last copy, in events folded one by one
            # A record at a time (a log block's lines in one go): positions count records,
            # and copies are `every` units of fold COST apart, a record costing 1 and each
            # line of a block 1/BLOCK_LINES_PER_EVENT more (folding a block line is a tail
            # append, an event a decode and a reducer): a seek folds about as long whatever
            # the records hold, and a day of blocks is not copied every block (the copies
            # were then half of the fold).
            for position, events in enumerate(reader.records(), 1):
                if position & 255 == 0 and stop is not None and stop.is_set():
                    return
                state.apply_batch(events)
                since += 1 + len(events) // BLOCK_LINES_PER_EVENT
                if since >= self.every and position < n:
                    since = 0
                    snapshot = self._copy(state)
                    with self._lock:
                        self._positions.append(position)
                        self._states.append(snapshot)
                        if len(self._positions) > self._max_checkpoints:
                            self._thin()
        with self._reading:  # the seek reader's index is built here too, not on the first seek
            if self._reader is None:
                self._reader = SessionReader(self.path)
        self.complete = True

    def _thin(self) -> None:
        """With the lock held: every other copy dropped and `every` doubled, when a session's
        events outnumber its records so much that `every` (sized from records) made too many
        copies. The first copy (position 0) stays."""
        self._positions = self._positions[::2]
        self._states = self._states[::2]
        self.every *= 2

    def _copy(self, state: ConsoleState) -> tuple[ConsoleState, list[Window], int]:
        if not self.shared_windows:
            return copy.deepcopy(state), [], -1
        # The markers only grow (one list, kept by the folded state): a copy keeps their count.
        memo: dict[int, object] = {id(state.markers): []}
        windows: list[Window] = []
        for host_name, host in state.hosts.items():
            for run_id, job in host.jobs.items():
                for attr, tail in vars(job).items():
                    if not isinstance(tail, LogTail):
                        continue
                    key = (host_name, run_id, attr)
                    lines = self._lines.setdefault(key, [])
                    # Lines appended since the last copy: one version step each, never more
                    # than the window.
                    new = min(tail.version - self._versions.get(key, 0), len(tail))
                    lines.extend(tail.newest(new))
                    self._versions[key] = tail.version
                    memo[id(tail)] = tail.emptied()
                    windows.append((key, len(lines), len(tail)))
        return copy.deepcopy(state, memo), windows, len(state.markers)

    def state_at(self, position: int) -> ConsoleState:
        """The state after the first `position` events (a fresh object the caller may keep)."""
        with self._lock:
            i = bisect_right(self._positions, position) - 1
            base, (snapshot, windows, markers) = self._positions[i], self._states[i]
        state = copy.deepcopy(snapshot)
        if markers >= 0:
            state.markers = self._markers[:markers]
        for (host, run_id, attr), end, count in windows:
            tail = getattr(state.hosts[host].jobs[run_id], attr)
            tail.refill(self._lines[(host, run_id, attr)][end - count:end])
        with self._reading:
            if self._reader is None:
                self._reader = SessionReader(self.path)
            for events in self._reader.records(base, position):
                state.apply_batch(events)
        return state

    def close(self) -> None:
        with self._reading:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def __len__(self) -> int:
        return len(self._positions)

