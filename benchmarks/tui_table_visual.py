"""One paint of the Stats and Overview table blocks in a running app: TableVisual (strips from
FastTable's lines) against RichVisual (the same block as a Rich Group), issue #17.

Each paint builds the block from the 8-GPU day-load state and turns it into the widget's strips
(Visual.to_strips, as a Static's paint does); alternated, best of 10 x 20; printed as the ratio
of TableVisual to RichVisual, measured in the same run.

    python benchmarks/tui_table_visual.py [--width 138]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any

from rich.console import Group
from rich.text import Text
from textual.visual import RichVisual, Visual
from textual.widgets import Static
from tui_first_paint import EmptyApp
from tui_table_paint import _host

from console.tui.table_lines import FastTable, TableVisual
from console.tui.widgets.overview import SPARK, gpu_table
from console.tui.widgets.stats import history_table, host_history


async def _run(width: int) -> None:
    host = _host()
    blocks: dict[str, Callable[[], list[Any]]] = {
        "stats history": lambda: [FastTable(history_table(host)), FastTable(host_history(host))],
        "overview gpus": lambda: [Text("GPUs (8)", style="bold underline"),
                                  FastTable(gpu_table(host, SPARK))],
    }
    app = EmptyApp()  # one Static, whose paint is measured with the blocks' visuals
    async with app.run_test(size=(width + 2, 40)):
        widget = app.query_one(Static)
        for name, parts in blocks.items():
            best = {"rich": float("inf"), "table": float("inf")}
            for _ in range(10):
                for kind in best:
                    t = time.perf_counter()
                    for _ in range(20):
                        got = parts()
                        visual = (RichVisual(widget, Group(*got)) if kind == "rich"
                                  else TableVisual(widget, *got))
                        Visual.to_strips(widget, visual, width, None, widget.visual_style)
                    best[kind] = min(best[kind], (time.perf_counter() - t) / 20)
            print(f"{name}: RichVisual {best['rich'] * 1e3:.2f} ms, TableVisual "
                  f"{best['table'] * 1e3:.2f} ms (x{best['table'] / best['rich']:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--width", type=int, default=138)
    asyncio.run(_run(parser.parse_args().width))


if __name__ == "__main__":
    main()
