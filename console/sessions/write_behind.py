"""A thread that does the recorder's disk writes, in order, off the thread that publishes events.

Why: a write() into the page cache can block for up to a few hundred milliseconds when the disk
is busy (dirty-page throttling, a journal commit behind a large truncate). The recorder wrote on
the event loop, so every such stall froze the TUI. Measured in tmux under a `dd` that rewrote a
2 GB file in a loop on the same disk: screen-switch p95 144 and 115 ms with the writes on the
loop, 44 and 50 ms with this thread. Here the thread takes the stall and the loop goes on.

What the thread holds is bounded (MAX_BYTES, about half a minute of an 8-GPU day's records; it
drains within milliseconds while the disk keeps up): past it `put` waits for room, as the
producer waited for every write before, so a stuck disk slows the console down instead of
filling its memory, and a kill -9 loses no more than what was queued.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

MAX_BYTES = 1 << 20


class WriteBehind:
    def __init__(self, name: str, *, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: deque[tuple[Callable[[], None], int]] = deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._closed = False
        self.failure: Exception | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, work: Callable[[], None], size: int = 0) -> None:
        """Queue `work` to run after everything queued before it. `size` counts against the
        bound; an item larger than the bound on its own waits only for an empty queue."""
        with self._cond:
            if self._closed:
                raise RuntimeError("write-behind queue is closed")
            while self._items and self._bytes + size > self.max_bytes:
                self._cond.wait()
            self._items.append((work, size))
            self._bytes += size
            self._cond.notify_all()

    def drain(self) -> None:
        """Wait until everything queued so far has run."""
        if threading.current_thread() is self._thread:
            return
        with self._cond:
            while self._items:
                self._cond.wait()

    def close(self) -> None:
        """Run what is queued, then stop the thread. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait()
                if not self._items:
                    return
                work, size = self._items[0]
            try:
                work()
            except Exception as exc:  # the caller's work reports its own errors; a bug must
                if self.failure is None:  # not stop the thread and leave drain() waiting
                    self.failure = exc
            finally:
                # Popped only once it has run: drain() returns when the work is done, not
                # merely taken.
                with self._cond:
                    self._items.popleft()
                    self._bytes -= size
                    self._cond.notify_all()
