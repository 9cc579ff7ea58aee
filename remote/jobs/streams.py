"""One merger of a process's stdout and stderr, for every transport.

Both streams are read concurrently and their items come out in arrival order until both close.
When the consumer stops early (a tail closed mid-stream), the readers are cancelled and awaited,
so no task outlives the merger and none dies with an unretrieved exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping

Read = Callable[[], Awaitable[bytes]]


async def merge_streams(
    readers: Mapping[str, Read | None],
    *,
    lost: tuple[type[BaseException], ...] = (),
) -> AsyncGenerator[tuple[str, bytes], None]:
    """(name, data) from each reader until it returns b"" (or is None: nothing to read). An
    exception of a `lost` type in a reader is raised here, to the consumer, once."""
    queue: asyncio.Queue[tuple[str, bytes] | BaseException | None] = asyncio.Queue()

    async def pump(name: str, read: Read | None) -> None:
        try:
            if read is not None:
                while data := await read():
                    queue.put_nowait((name, data))
        except lost as exc:
            queue.put_nowait(exc)
        finally:
            queue.put_nowait(None)

    tasks = [asyncio.create_task(pump(name, read)) for name, read in readers.items()]
    open_streams = len(tasks)
    try:
        while open_streams:
            item = await queue.get()
            if item is None:
                open_streams -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
