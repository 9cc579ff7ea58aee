"""The console state at any point of a replay without folding the session from its start.

A seek used to fold every event from 0 to the target (seconds for a 1M-event session). Here the
state is copied every `every` events while the session is folded once (in the background, when
the replay opens); a seek then takes the nearest copy before the target (a bisect over the
checkpoint positions) and folds at most `every` events on top. The session reader's offset
index gives the target event itself in O(1).
"""

from __future__ import annotations

import copy
import os
import threading
from bisect import bisect_right
from collections.abc import Iterable

from console.session import SessionReader
from console.tui.model import ConsoleState

# A copy holds each job's log window (up to 100,000 line references, ~0.8 MB): at most this many
# copies per session bounds the memory, at least this many events apart bounds the copying.
MAX_CHECKPOINTS = 128
MIN_EVERY = 2048


class StateCheckpoints:
    """Each of `build` and `state_at` reads the session through its own SessionReader: a reader
    is one file position, not to be shared between threads (the replay loop has its own)."""

    def __init__(self, path: str | os.PathLike[str], hosts: Iterable[str], *,
                 every: int | None = None) -> None:
        self.path = path
        self.hosts = list(hosts)
        self.every = every or MIN_EVERY
        self._positions: list[int] = [0]
        self._states: list[ConsoleState] = [ConsoleState(self.hosts)]
        self._lock = threading.Lock()  # the checkpoint lists
        self._reading = threading.Lock()  # the seek reader
        self._reader: SessionReader | None = None
        self.complete = False

    def build(self, stop: threading.Event | None = None) -> None:
        """Fold the whole session once, keeping a copy of the state every `every` events. Meant
        for a worker thread while `state_at` is used: copies are appended under a lock."""
        state = ConsoleState(self.hosts)
        with SessionReader(self.path) as reader:
            n = len(reader)
            self.every = max(self.every, -(-n // MAX_CHECKPOINTS))
            for start in range(0, n, self.every):
                if stop is not None and stop.is_set():
                    return
                state.apply_all(reader.events(start, min(start + self.every, n)))
                if start + self.every < n:
                    snapshot = copy.deepcopy(state)
                    with self._lock:
                        self._positions.append(start + self.every)
                        self._states.append(snapshot)
        with self._reading:  # the seek reader's index is built here too, not on the first seek
            if self._reader is None:
                self._reader = SessionReader(self.path)
        self.complete = True

    def state_at(self, position: int) -> ConsoleState:
        """The state after the first `position` events (a fresh object the caller may keep)."""
        with self._lock:
            i = bisect_right(self._positions, position) - 1
            base, state = self._positions[i], self._states[i]
        state = copy.deepcopy(state)
        with self._reading:
            if self._reader is None:
                self._reader = SessionReader(self.path)
            state.apply_all(self._reader.events(base, position))
        return state

    def close(self) -> None:
        with self._reading:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def __len__(self) -> int:
        return len(self._positions)
