"""What one paint of the Stats and Overview tables costs, out of the app (issue #17).

Builds the 8-GPU state of the day load (130 samples, processes under some GPUs), then times
what a Static does for each block on a paint: build the Rich table from the state and render it
to cropped lines as Textual's RichVisual does (console.render + Segment.split_and_crop_lines).
Figures are ratios against Rich rendering the same tables itself, measured in the same run;
--profile FILE writes a cProfile of the FastTable loop.

    python benchmarks/tui_table_paint.py [--width 140] [--repeat 200] [--profile /tmp/p.prof]
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console, Group
from rich.segment import Segment

from console.tui.table_lines import FastTable
from console.tui.widgets.overview import SPARK, gpu_table
from console.tui.widgets.stats import history_table, host_history
from remote.spine import events as ev
from remote.spine.events import Event


def _host(samples: int = 130) -> Any:
    from datetime import UTC, datetime

    from console.tui.model import ConsoleState
    state = ConsoleState(["box"])
    t0 = datetime(2026, 12, 3, tzinfo=UTC)
    for k in range(samples):
        gpus = [{"index": g, "name": "NVIDIA H200", "util": (k * 7 + g * 13) % 101,
                 "mem_used": (60 + g) * 2**30, "mem_total": 141 * 2**30, "power": 100.0 + 55 * g,
                 "power_limit": 700, "temp": 50 + g, "sm_clock": 1980, "pcie_tx": 2**20 * g,
                 "procs": [{"pid": 4242 + g, "name": "python3", "mem_used": 2**34}] if g % 3 == 0
                 else []} for g in range(8)]
        state.apply(Event(ev.STATS_SAMPLE, "box", {
            "source": "nvml", "gpus": gpus, "host": {"cpu": 10.0 + k % 50, "mem_used": 2**35,
                                                     "mem_total": 2**38, "load1": 1.0 + k % 7}}, t0))
    return state.host("box")


def _paint(console: Console, renderable: Any, width: int) -> int:
    options = console.options.update(width=width, height=None, highlight=False)
    lines = list(Segment.split_and_crop_lines(console.render(renderable, options), width,
                                              include_new_lines=False, pad=False))
    return len(lines)


def _time(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(10):
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t) / repeat)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--width", type=int, default=140)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--profile", type=Path)
    args = parser.parse_args()
    host = _host()
    width, narrow = args.width, args.width < 100
    console = Console(width=width, color_system="truecolor", legacy_windows=False,
                      file=open("/dev/null", "w"))
    blocks: dict[str, Callable[[], list[Any]]] = {
        "stats history": lambda: [history_table(host, narrow), host_history(host, narrow)],
        "overview gpus": lambda: [gpu_table(host, SPARK, narrow)],
    }
    print(f"width {width}, 8 GPUs, best of 10 x {args.repeat}")
    for name, make in blocks.items():
        rich = _time(lambda make=make: _paint(console, Group(*make()), width), args.repeat)
        build = _time(make, args.repeat)
        fast = _time(lambda make=make: _paint(console, Group(*(FastTable(t) for t in make())),
                                              width), args.repeat)
        print(f"{name:14s} rich {rich * 1e3:6.2f} ms  fast {fast * 1e3:6.2f} ms "
              f"(x{fast / rich:.2f} of rich; table build alone x{build / rich:.2f})")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.repeat):
            for make in blocks.values():
                _paint(console, Group(*(FastTable(t) for t in make())), width)
        profile.disable()
        profile.dump_stats(args.profile)


if __name__ == "__main__":
    main()
