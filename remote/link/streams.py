"""One merger of a process's stdout and stderr, for every transport.

Both streams are read concurrently and their items come out in arrival order until both close.
When the consumer stops early (a tail closed mid-stream), the readers are cancelled and awaited,
so no task outlives the merger and none dies with an unretrieved exception.

It is a plain async iterator, not an async generator: a generator's `aclose()` called while it
is suspended inside `__anext__` (a tail ended by a fatal error, or the loop's generator
finaliser racing the consumer's own close) raises "aclose(): asynchronous generator is already
running", which the loop prints as a traceback before the one error line (issue 33). A class's
`aclose()` only cancels and awaits the readers, so it is safe at any moment and idempotent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

Read = Callable[[], Awaitable[bytes]]


class MergedStreams:
    """(name, data) from each reader until it returns b"" (or is None: nothing to read). An
    exception of a `lost` type in a reader is raised here, to the consumer, once."""

    def __init__(self, readers: Mapping[str, Read | None], *,
                 lost: tuple[type[BaseException], ...] = ()) -> None:
        self._readers = dict(readers)
        self._lost = lost
        self._queue: asyncio.Queue[tuple[str, bytes] | BaseException | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] | None = None
        self._open = len(self._readers)
        self._closed = False

    def __aiter__(self) -> MergedStreams:
        return self

    async def _pump(self, name: str, read: Read | None) -> None:
        try:
            if read is not None:
                while data := await read():
                    self._queue.put_nowait((name, data))
        except self._lost as exc:
            self._queue.put_nowait(exc)
        finally:
            self._queue.put_nowait(None)

    async def __anext__(self) -> tuple[str, bytes]:
        if self._tasks is None and not self._closed:  # started on first use: needs a loop
            self._tasks = [asyncio.create_task(self._pump(name, read))
                           for name, read in self._readers.items()]
        while self._open and not self._closed:
            item = await self._queue.get()
            if item is None:
                self._open -= 1
            elif isinstance(item, BaseException):
                await self.aclose()
                raise item
            else:
                return item
        await self.aclose()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Cancel and await the readers; safe twice and while a consumer waits in __anext__."""
        self._closed = True
        tasks, self._tasks = self._tasks or [], []
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
