"""TUI start-to-first-paint, against an empty Textual app measured in the same run.

Two measurements, each as the median of --runs:
- in process (headless): from constructing the app to its first compositor update (the first
  call to App._display with something to draw). Console app on a replayed demo session and on a
  live source, vs an empty App with one Static.
- real terminal (tmux): from spawning `python -m console replay FILE` to its title showing in
  capture-pane, vs spawning a Python process that runs the empty app. Includes interpreter start
  and imports, i.e. what an operator waits for.
Target: the console's first paint under 1 s.

    python benchmarks/tui_first_paint.py [--runs N] [--no-tmux]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import Tmux, watch_paints
from textual.app import App, ComposeResult
from textual.widgets import Static


class EmptyApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("EMPTY-APP-READY")


# The same app as a script of its own, for the terminal's baseline.
EMPTY_APP = ("from textual.app import App, ComposeResult\nfrom textual.widgets import Static\n"
             + inspect.getsource(EmptyApp) + "EmptyApp().run()\n")


async def first_paint(make: Callable[[], App[Any]]) -> float:
    t0 = time.perf_counter()
    app = make()
    paints = watch_paints(app)
    async with app.run_test(size=(120, 36)) as pilot:
        while not paints:
            await pilot.pause(0.005)
    return paints[0][0] - t0


def tmux_first_paint(argv: list[str], text: str) -> float:
    t0 = time.perf_counter()
    term = Tmux(argv, (120, 36))
    try:
        term.wait_for(text)
        return time.perf_counter() - t0
    finally:
        term.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-tmux", action="store_true")
    args = ap.parse_args()

    from console.sessions.reader import SessionReader
    from console.tui.app import ConsoleApp
    from console.tui.controller import LiveSource, ReplaySource
    from remote.link.hosts import Config
    from tests.tui_sessions import demo_session

    with tempfile.TemporaryDirectory() as tmp:
        session = demo_session(Path(tmp) / "demo.jsonl")
        readers: list[SessionReader] = []

        def replay() -> App[Any]:
            readers.append(SessionReader(session))
            return ConsoleApp(ReplaySource(readers[-1], speed=float("inf")))

        def live() -> App[Any]:
            return ConsoleApp(LiveSource(Config(hosts={}, path=None)))

        cases: dict[str, Callable[[], App[Any]]] = {"empty Textual app (baseline)": EmptyApp,
                                                    "console replay": replay, "console live": live}
        asyncio.run(first_paint(EmptyApp))  # warm imports so the first case is not charged for them
        results: dict[str, float] = {}
        for name, make in cases.items():
            results[name] = statistics.median(asyncio.run(first_paint(make)) for _ in range(args.runs))
        base = results["empty Textual app (baseline)"]
        print(f"in-process first paint, median of {args.runs} (headless, 120x36):")
        for name, v in results.items():
            print(f"  {name:32s} {v * 1000:8.1f} ms   x{v / base:5.2f} of baseline")
        for r in readers:
            r.close()

        if not args.no_tmux and shutil.which("tmux"):
            empty_py = Path(tmp) / "empty_app.py"
            empty_py.write_text(EMPTY_APP)
            t_base = statistics.median(tmux_first_paint([sys.executable, str(empty_py)], "EMPTY-APP-READY")
                                       for _ in range(args.runs))
            t_console = statistics.median(
                tmux_first_paint([sys.executable, "-m", "console", "replay", str(session)], "EAGLE-3 console")
                for _ in range(args.runs))
            print(f"real terminal (tmux) spawn-to-first-paint, median of {args.runs}:")
            print(f"  {'empty Textual app (baseline)':32s} {t_base * 1000:8.1f} ms")
            print(f"  {'console replay':32s} {t_console * 1000:8.1f} ms   x{t_console / t_base:5.2f} of baseline"
                  f"   target < 1000 ms: {'met' if t_console < 1.0 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
