"""`wait_for` that never swallows a cancellation.

Python 3.11's `asyncio.wait_for` returns the inner result when the task is cancelled in the
same loop turn as the inner awaitable finishes (CPython gh-86296, fixed in 3.12 by building it
on `asyncio.timeout`). The console cancels its background streams on the way out; one such
lost cancel left the live-stats task sampling forever and the TUI's close waiting on it. This
is 3.12's construction, usable on 3.11: a cancel from outside always propagates, and only the
deadline becomes TimeoutError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(aw: Awaitable[T], timeout: float | None) -> T:
    if timeout is None:
        return await aw
    async with asyncio.timeout(timeout):
        return await aw
