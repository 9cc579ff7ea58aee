"""remote.link.aio.wait_for: a cancel that lands in the same loop turn as the result is not lost."""

from __future__ import annotations

import asyncio

import pytest

from remote.link import aio


async def test_a_cancel_racing_the_result_still_cancels() -> None:
    loop = asyncio.get_running_loop()
    inner: asyncio.Future[int] = loop.create_future()
    task = asyncio.create_task(aio.wait_for(inner, 10))
    await asyncio.sleep(0)  # the task now waits on `inner`
    inner.set_result(1)  # its wake-up is scheduled...
    task.cancel()  # ...and the cancel arrives in the same turn
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_result_and_deadline() -> None:
    assert await aio.wait_for(asyncio.sleep(0, "x"), 5) == "x"
    assert await aio.wait_for(asyncio.sleep(0, "y"), None) == "y"
    with pytest.raises(TimeoutError):
        await aio.wait_for(asyncio.sleep(10), 0.01)


async def test_the_stdlib_race_this_guards_against_is_real_here() -> None:
    """The same race through asyncio.wait_for: on 3.11 the cancel is swallowed, the reason
    remote/link/aio.py exists (on 3.12+ both behave the same and this records that)."""
    import sys

    loop = asyncio.get_running_loop()
    inner: asyncio.Future[int] = loop.create_future()
    task = asyncio.create_task(asyncio.wait_for(inner, 10))
    await asyncio.sleep(0)
    inner.set_result(1)
    task.cancel()
    try:
        got: int | None = await task
    except asyncio.CancelledError:
        got = None
    assert (got == 1) == (sys.version_info < (3, 12))


def test_console_code_uses_the_safe_wait_for() -> None:
    """A new asyncio.wait_for in the console's own async code brings the lost-cancel race back."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    offenders = [str(p.relative_to(root)) for d in ("remote", "console")
                 for p in (root / d).rglob("*.py")
                 if "probes" not in p.parts and "asyncio.wait_for(" in p.read_text()]
    assert offenders == []
