"""One retry policy for everything that asks the box again after a dropped connection.

A dropped connection is worth retrying (the transport reconnects underneath); a host key that
changed, refused credentials or a broken config are not: retrying them hides the one message the
operator must see (issue 18: a host key changed mid-`console jobs tail` used to be retried
silently ~60 times). `Backoff.failed` re-raises those at once, so every loop built on it stops
with the host-key message and exit code 3.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from remote.errors import AuthFailed, ConfigError, ConnectionFailed, HostKeyError

# Errors no retry can fix: the operator has to act (check the key, the credentials, the file).
FATAL: tuple[type[BaseException], ...] = (HostKeyError, AuthFailed, ConfigError)


def is_fatal(exc: BaseException) -> bool:
    return isinstance(exc, FATAL)


@dataclass
class Backoff:
    """Capped, growing delays between attempts; `limit` failures in a row end the loop.

    delay(n) = min(cap, base * n): linear growth, the cheap policy for a helper on the box (the
    transport does its own reconnect backoff underneath)."""

    what: str
    base: float = 0.05
    cap: float = 1.0
    limit: int | None = 60
    failures: int = 0

    def delay(self) -> float:
        return min(self.cap, self.base * self.failures)

    def succeeded(self) -> None:
        self.failures = 0

    async def failed(self, exc: BaseException | None = None) -> None:
        """After a failed attempt: raise a fatal error as is, raise ConnectionFailed once the
        limit is reached, else wait before the next attempt."""
        if exc is not None and is_fatal(exc):
            raise exc
        self.failures += 1
        if self.limit is not None and self.failures > self.limit:
            why = f": {exc}" if exc is not None and str(exc) else ""
            raise ConnectionFailed(f"{self.what}: gave up after {self.failures} tries{why}")
        delay = self.delay()
        if delay > 0:
            await asyncio.sleep(delay)


def reraise_fatal(exc: BaseException) -> None:
    """For loops that note a drop and retry later: a fatal error ends them here."""
    if is_fatal(exc):
        raise exc


__all__ = ["FATAL", "Backoff", "is_fatal", "reraise_fatal"]
