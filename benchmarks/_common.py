"""The start every benchmark shares. A benchmark runs as `python benchmarks/NAME.py` from any
directory and imports the project's packages (console, remote, tests) and its sibling
benchmarks; importing this first puts the repository root and benchmarks/ on sys.path, once
here instead of in a copy at the top of each script."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

for _path in (str(ROOT / "benchmarks"), str(ROOT)):
    if _path not in sys.path:
        sys.path.insert(0, _path)


def int_options(description: str | None = None, /, **defaults: int) -> argparse.Namespace:
    """The command line of a benchmark whose options are all sizes (run_all.py's QUICK passes
    smaller ones): an integer option per keyword, with its default (`max_tokens=32` is
    `--max-tokens`, 32 unless given)."""
    ap = argparse.ArgumentParser(description=description)
    for name, default in defaults.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    return ap.parse_args()


# The screens the TUI switch benchmarks go round, by the key that shows each.
SCREEN_KEYS = {"2": "overview", "5": "pipeline", "6": "stats", "8": "replay"}


async def shown_at(paints: list[tuple[float, str]], screen: str, since: float,
                   timeout: float = 5.0) -> float | None:
    """When (perf_counter) the first paint of `screen` at or after `since` came, from the
    (when, screen shown) pairs an instrumented app appends to `paints`; None if none came
    within `timeout`: a switch's latency is that paint, not the key press's return."""
    import asyncio
    import time

    while True:
        shown = [t for t, name in paints if t >= since and name == screen]
        if shown:
            return shown[0]
        if time.perf_counter() - since > timeout:
            return None
        await asyncio.sleep(0.001)
