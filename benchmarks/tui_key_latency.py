"""Key-press-to-repaint latency of the console while a job prints 10,000 lines/s into the
pipeline log view, against the same measurement with no log traffic (baseline, same run).

The job's lines arrive as job.line events on the app's bus from a producer task on the same
event loop, exactly as the remote layer delivers them (batches every 5 ms), into a log already
5,000 lines long. Two kinds of key press, each measured idle (baseline) and under the stream:
- page up / page down in the log view while it is visible and streaming;
- switching between the Overview and Pipeline screens (the heaviest common key).
Latency runs from posting the key event to the first compositor update after the key's action
ran. Headless, 120x36. Also prints the lines delivered per second and checks that the log view
kept every line (its tail count).

    python benchmarks/tui_key_latency.py [--rate 10000] [--presses 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from _common import watch_paints  # first: the repository on sys.path
from textual import events

from console.tui.app import ConsoleApp
from console.tui.controller import LiveSource
from console.tui.widgets.pipeline import LogView
from pipeline.stages import TRAIN
from remote.link.hosts import Config
from remote.spine import events as ev

HOST = "local"
PREFILL = 5_000
JOB = "train"  # not a stage: the synthetic job's name (run r-train runs the train stage)


async def measure(rate: int, presses: int, mode: str = "switch") -> tuple[list[float], float, int, int]:
    """mode "switch": alternate Overview/Pipeline; "scroll": page up/down in the visible log."""
    app = ConsoleApp(LiveSource(Config(hosts={}, path=None)), start_screen="pipeline")
    paints = watch_paints(app)
    handled: list[float] = []
    original_show = app.action_show

    def show(name: str) -> None:
        handled.append(time.perf_counter())  # the key reached its action; the next paint shows it
        original_show(name)

    app.action_show = show  # type: ignore[method-assign]
    page_up, page_down = LogView.action_page_up, LogView.action_page_down

    def wrap(fn: Any) -> Any:
        def action(self: Any) -> None:
            handled.append(time.perf_counter())
            fn(self)
        return action

    LogView.action_page_up = wrap(page_up)  # type: ignore[method-assign]
    LogView.action_page_down = wrap(page_down)  # type: ignore[method-assign]
    produced = 0
    async with app.run_test(size=(120, 36)) as pilot:
        bus = app.source.bus
        bus.emit(ev.STAGE_START, HOST, stage=TRAIN, run_id="r-train")
        bus.emit(ev.JOB_STARTED, HOST, run_id="r-train", name=JOB, argv=["python"], pid=1, log="log")
        stop = asyncio.Event()
        for i in range(PREFILL):  # a log already long, so scrolling it has something to show
            bus.emit(ev.JOB_LINE, HOST, run_id="r-train", name=JOB, text=f"earlier line {i}", offset=i)
        produced = PREFILL

        async def producer() -> None:
            nonlocal produced
            start = time.perf_counter()
            while not stop.is_set():
                due = int((time.perf_counter() - start) * rate)
                while produced < due:
                    produced += 1
                    bus.emit(ev.JOB_LINE, HOST, run_id="r-train", name=JOB,
                             text=f"step {produced} loss {1 / produced:.6f} lr 3e-4 tokens/s 12345.6",
                             offset=produced * 64)
                await asyncio.sleep(0.005)

        task = asyncio.create_task(producer()) if rate else None
        await pilot.pause(0.5)
        if mode == "scroll":
            app.query_one(LogView).focus()
            await pilot.pause(0.1)
        t_start, n_start = time.perf_counter(), produced
        latencies: list[float] = []
        for i in range(presses):
            keys = ("pageup", "pagedown") if mode == "scroll" else ("2", "5")
            key = keys[i % 2]
            handled.clear()
            t0 = time.perf_counter()
            app.post_message(events.Key(key, key))
            deadline = t0 + 5
            while time.perf_counter() < deadline:
                await asyncio.sleep(0.001)
                if handled and any(d >= handled[0] for d, _ in paints):
                    break
            after = [d for d, _ in paints if handled and d >= handled[0]]
            latencies.append((after[0] if after else time.perf_counter()) - t0)
            await asyncio.sleep(0.1)
        elapsed = time.perf_counter() - t_start
        delivered_rate = (produced - n_start) / elapsed
        stop.set()
        if task:
            await task
        while app._pending:
            app.drain()
            await pilot.pause(0.01)
        log = app.query_one(LogView)
        kept = log.tail.total if log.tail is not None else 0
    LogView.action_page_up, LogView.action_page_down = page_up, page_down  # type: ignore[method-assign]
    return latencies, delivered_rate, produced, kept


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=10_000, help="log lines per second")
    ap.add_argument("--presses", type=int, default=20)
    args = ap.parse_args()
    results = {}
    for mode in ("switch", "scroll"):
        base, _, _, _ = asyncio.run(measure(0, args.presses, mode))
        loaded, delivered, produced, kept = asyncio.run(measure(args.rate, args.presses, mode))
        results[mode] = (base, loaded, delivered, produced, kept)

    def fmt(xs: list[float]) -> str:
        xs = sorted(xs)
        return (f"median {statistics.median(xs) * 1000:7.1f} ms   p90 {xs[int(len(xs) * 0.9) - 1] * 1000:7.1f} ms"
                f"   max {xs[-1] * 1000:7.1f} ms")

    titles = {"switch": "screen switches Overview <-> Pipeline",
              "scroll": "page up / page down in the streaming log (log visible throughout)"}
    for mode, (base, loaded, delivered, produced, kept) in results.items():
        print(f"key-press-to-repaint, {args.presses} {titles[mode]} (headless 120x36):")
        print(f"  idle (baseline)            {fmt(base)}")
        print(f"  {args.rate:,} lines/s log     {fmt(loaded)}   "
              f"x{statistics.median(loaded) / statistics.median(base):5.2f} of baseline (median)")
        print(f"  lines delivered: {delivered:,.0f}/s during the presses; {produced:,} produced, {kept:,} in the "
              f"log view ({'all kept' if kept == produced else 'MISSING LINES'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
