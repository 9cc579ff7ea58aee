"""The extract stage's writer pool: samples written on threads while the next ones are captured,
and the figures that say which of the two sets the pace.

Why threads: one thread copying a sample into the page cache reaches about one core's memory
copy rate (on this project's 2-core machine ~2-3 GB/s of CPU time into tmpfs, and torch.save's
CRC32 makes the 0.3 format ~1.5 GB/s; docs/measurements.md, issue #54), below what a box's NVMe
array takes. `os.writev` and torch.save's record writer release the GIL, so writers on several
threads copy in parallel. Bounded: the caller says how many samples may be unwritten when it
hands over the next (`wait`), so memory holds no more samples than it allows, and a capture that
has to wait for the writer is counted (`waits`, `waited`): the disk or the writer, not the
capture, is then the limit, and the progress line says so (`fields`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path
from types import TracebackType
from typing import Any

from pipeline.progress import Progress, rate_means_something

MAX_THREADS = 4  # ~4 page-cache copies in parallel outrun a several-GB/s array; more buys nothing


def default_threads() -> int:
    """Writer threads for this machine: one per two cores, 1 to MAX_THREADS. Half the cores
    leave the capture (the hf route's model, the vLLM driver's unpacking) its own; on 2 cores
    a second writer thread cost ~25 % more CPU per byte than one (docs/measurements.md)."""
    return max(1, min(MAX_THREADS, (os.cpu_count() or 1) // 2))


class WritePool:
    """Write jobs on `threads` threads. `submit` never blocks; `wait(n)` blocks until at most `n`
    jobs are unfinished (and raises the first failed job's error, before anything more is
    handed over). Figures: samples, tokens and bytes written; `busy`, the seconds during which
    at least one write ran (so bytes / busy is the writer's own rate, however many threads);
    `waits` and `waited`, how often and how long a `wait` had to block."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads or default_threads()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="extract-write")
        self._pending: set[Future[None]] = set()
        self._lock = threading.Lock()
        self._running = 0
        self._busy_since = 0.0
        self._busy = 0.0
        self.samples = 0
        self.tokens = 0
        self.bytes = 0
        self.waits = 0
        self.waited = 0.0

    def submit(self, path: Path, tokens: int, write: Callable[[], Any]) -> None:
        """`write()` on a writer thread; it makes the file `path` (its size is counted)."""
        self._pending.add(self._pool.submit(self._job, path, tokens, write))

    def _job(self, path: Path, tokens: int, write: Callable[[], Any]) -> None:
        with self._lock:
            if not self._running:
                self._busy_since = time.monotonic()
            self._running += 1
        try:
            write()
            size = os.stat(path).st_size
        finally:
            with self._lock:
                self._running -= 1
                if not self._running:
                    self._busy += time.monotonic() - self._busy_since
        with self._lock:
            self.samples += 1
            self.tokens += tokens
            self.bytes += size

    @property
    def busy(self) -> float:
        with self._lock:
            running = time.monotonic() - self._busy_since if self._running else 0.0
            return self._busy + running

    def wait(self, unfinished: int = 0, *, count: bool = True) -> float:
        """Block until at most `unfinished` jobs are left; the seconds it blocked (a block is
        counted in `waits` unless `count` is false: the last files at the end of a stage are
        not a capture waiting). A failed job's error is raised here."""
        t0 = time.monotonic()
        blocked = False
        while True:
            done = {f for f in self._pending if f.done()}
            self._pending -= done
            for f in done:
                f.result()  # a failed write raises here
            if len(self._pending) <= unfinished:
                break
            blocked = True
            wait_futures(self._pending, return_when=FIRST_COMPLETED)
        took = time.monotonic() - t0
        if blocked and count:
            self.waits += 1
            self.waited += took
        return took

    def fields(self, captured_tokens: int, capture_seconds: float) -> dict[str, Any]:
        """The progress record's figures: the capture's rate over the time spent capturing,
        the writer's over its busy time (tokens/s both, so they compare; MB/s beside), and the
        captures that waited on the writer. A rate only once it means something."""
        out: dict[str, Any] = {}
        if rate_means_something(captured_tokens, capture_seconds):
            out["capture_tok_s"] = round(captured_tokens / capture_seconds, 1)
        busy = self.busy
        if rate_means_something(self.tokens, busy):
            out["write_tok_s"] = round(self.tokens / busy, 1)
            out["write_mb_s"] = round(self.bytes / busy / 1e6, 1)
        out["writer_waits"] = self.waits
        out["writer_wait_s"] = round(self.waited, 3)
        return out

    def close(self) -> None:
        """Every job finished (errors raised), the threads gone."""
        try:
            self.wait(0, count=False)
        finally:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> WritePool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
        else:  # the stage failed: let the started writes end, report the first error only
            self._pool.shutdown(wait=True, cancel_futures=True)


class CaptureFeed:
    """One route's captures handed to the stage's writer pool (pipeline.write_pool), with the
    progress it reports: written samples (a sample is done when its file is: a resume trusts
    only whole files), the capture's and the writer's rates, the captures that waited on the
    writer. `in_flight`: how many handed-over samples may be unwritten when the next is handed
    over (the pool's size unless said: no more samples in memory than the pool writes)."""

    def __init__(self, progress: Progress | None, threads: int | None = None) -> None:
        self.pool = WritePool(threads)
        self.progress = progress
        self.base = progress.done if progress is not None else 0
        self.captured = 0
        self.capture_s = 0.0

    @contextlib.contextmanager
    def capturing(self, tokens: int) -> Iterator[None]:
        """`with feed.capturing(tokens):` around a capture: its time and tokens counted."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.capture_s += time.monotonic() - t0
            self.captured += tokens

    def hand_over(self, path: Path, tokens: int, write: Any, in_flight: int | None = None) -> None:
        self.pool.wait(self.pool.threads - 1 if in_flight is None else in_flight)
        self.report()
        self.pool.submit(path, tokens, write)

    def report(self, *, force: bool = False) -> None:
        if self.progress is not None:
            self.progress.update(self.base + self.pool.samples, force=force,
                                 tokens=self.pool.tokens,
                                 **self.pool.fields(self.captured, self.capture_s))

    def finish(self) -> int:
        """Every file written (a failed write raises); the tokens written."""
        self.pool.wait(0, count=False)
        self.report(force=True)
        return self.pool.tokens
