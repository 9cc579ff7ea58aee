"""Live acceptance while the server serves real traffic: one window per scrape interval.

A restart between two scrapes does not end the watch (the operator is usually restarting the
server on purpose): the window is reported as reset and the next one starts from the new
counters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from remote.bench.client import VllmClient
from remote.bench.metrics import Acceptance, acceptance_between
from remote.errors import CountersReset


@dataclass(frozen=True)
class WatchWindow:
    index: int
    seconds: float
    acceptance: Acceptance

    @property
    def accepted_tok_s(self) -> float:
        return self.acceptance.accepted / self.seconds if self.seconds > 0 else 0.0

    @property
    def drafted_tok_s(self) -> float:
        return self.acceptance.draft_tokens / self.seconds if self.seconds > 0 else 0.0


async def watch(
    client: VllmClient,
    model: str | None,
    *,
    interval: float,
    count: int | None,
    on_window: Callable[[WatchWindow], None],
    on_reset: Callable[[str], None],
) -> int:
    """Scrape every `interval` seconds; `count` windows, or until cancelled. Returns windows."""
    previous = (await client.scrape()).for_model(model, client.shown_url)
    t_prev = time.monotonic()
    done = 0
    while count is None or done < count:
        await asyncio.sleep(interval)
        current = (await client.scrape()).for_model(model, client.shown_url)
        now = time.monotonic()
        try:
            acceptance = acceptance_between(previous, current, client.shown_url)
        except CountersReset as exc:
            on_reset(str(exc))
        else:
            on_window(WatchWindow(done, now - t_prev, acceptance))
        done += 1
        previous, t_prev = current, now
    return done
