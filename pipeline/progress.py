"""Machine-readable progress: one JSON object per stdout line, prefixed so the console can tell
them from library chatter (transformers, speculators and tqdm print freely on the same streams).

Line shape: `@@eagle3 {"type": "start"|"progress"|"end"|"skipped"|"info"|"error", "stage": ...}`.
progress lines carry done, total, unit, elapsed (seconds since the stage's progress began) and,
once it means something (rate_means_something), rate (units per second).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

PREFIX = "@@eagle3 "
# Under torchrun (pipeline/ranks.py) the ranks of a box share one log and step in lockstep:
# rank 0 alone reports progress, with the number of ranks; set by `for_rank`.
_RANKS: dict[str, int] = {}


def for_rank(rank: int, world_size: int) -> None:
    """This process is rank `rank` of `world_size`: only rank 0's Progress prints."""
    _RANKS.update(rank=rank, world_size=world_size)


def emit(type_: str, stage: str, **fields: Any) -> None:
    record = {"type": type_, "stage": stage, **fields}
    sys.stdout.write(PREFIX + json.dumps(record, default=str, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def parse(line: str) -> dict[str, Any] | None:
    """The record on a progress line, or None for any other line (malformed included)."""
    if not line.startswith(PREFIX):
        return None
    try:
        data = json.loads(line[len(PREFIX):])
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's stack
        return None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        return None
    return data


# A rate over a few milliseconds or a single unit is noise (vocab once read "30,472,854.7
# tokens/s" after 2 ms), not a figure: below these the elapsed time is what is shown.
RATE_MIN_SECONDS = 1.0
RATE_MIN_UNITS = 2


def rate_means_something(units: float, seconds: float | None) -> bool:
    """Whether `units` done in `seconds` make a rate worth showing (the box's progress records
    and the console's views ask the same question here)."""
    return seconds is not None and seconds >= RATE_MIN_SECONDS and units >= RATE_MIN_UNITS


class Progress:
    """Rate-limited progress for one stage: at most a few lines a second, always the last."""

    def __init__(self, stage: str, total: int, unit: str, *, interval: float = 0.5) -> None:
        self.stage = stage
        self.total = total
        self.unit = unit
        self.interval = interval
        self.done = 0
        self._start = time.monotonic()
        self._last = 0.0
        self._base = 0

    def resume_at(self, done: int) -> None:
        """Work already on disk from an earlier run: counted, but not in the rate."""
        self.done = self._base = done

    def advance(self, n: int = 1, **extra: Any) -> None:
        self.update(self.done + n, **extra)

    def update(self, done: int, *, force: bool = False, **extra: Any) -> None:
        self.done = done
        now = time.monotonic()
        if not force and now - self._last < self.interval and done < self.total:
            return
        self._last = now
        if _RANKS:
            if _RANKS["rank"] != 0:
                return
            extra = {**extra, "ranks": _RANKS["world_size"]}
        elapsed = now - self._start
        units = done - self._base
        rate = {"rate": round(units / elapsed, 3)} if rate_means_something(units, elapsed) else {}
        emit("progress", self.stage, done=done, total=self.total, unit=self.unit,
             elapsed=round(elapsed, 3), **rate, **extra)
