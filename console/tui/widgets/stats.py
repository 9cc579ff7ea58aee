"""Stats / AllReduce screen: per-GPU history, the bus-bandwidth sweep as a bar chart and the
trace's share-of-decode table. AllReduce rows come from the stats engineer's producers, so
columns are read from the rows rather than assumed (size/busbw keys are looked up by name)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.tui.model import ALLREDUCE, STATS, ConsoleState, HostState
from console.tui.render import columns_of, fmt_bytes, fmt_num, hbar, spark
from console.tui.widgets.common import View

SIZE_KEYS = ("size", "bytes", "message_bytes", "size_bytes")
BW_KEYS = ("busbw", "bus_bw", "busbw_bytes_s", "bus_bandwidth")


def _first(row: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if k in row:
            return row[k]
    return None


def sweep_chart(rows: list[dict[str, Any]], width: int = 40) -> Group | Table | Text:
    points = [(_first(r, SIZE_KEYS), _first(r, BW_KEYS)) for r in rows]
    points = [(s, b) for s, b in points if isinstance(b, (int, float))]
    if not points:
        return generic_table(rows, "AllReduce sweep")
    top = max(b for _, b in points) or 1.0
    t = Table(box=None, title="AllReduce bus bandwidth by message size", title_justify="left",
              header_style="bold")
    t.add_column("size", justify="right")
    t.add_column("busbw", no_wrap=True)
    t.add_column("", justify="right")
    for size, bw in points:
        t.add_row(fmt_bytes(size) if isinstance(size, (int, float)) else str(size),
                  Text(hbar(bw, top, width), style="cyan"), f"{fmt_bytes(bw)}/s")
    return Group(t)


def generic_table(rows: list[dict[str, Any]], title: str) -> Table | Text:
    if not rows:
        return Text(f"{title}: no data yet", style="dim")
    t = Table(box=None, title=title, title_justify="left", header_style="bold")
    cols = columns_of(rows)
    for c in cols:
        t.add_column(c)
    for r in rows:
        t.add_row(*(fmt_num(r.get(c), 2) if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols))
    return t


def history_table(host: HostState) -> Table:
    t = Table(box=None, title="GPU history", title_justify="left", header_style="bold")
    for col in ("GPU", "util % (history)", "power W (history)", "mem", "temp", "sm MHz", "pcie tx/rx"):
        t.add_column(col, no_wrap=True)
    for g in sorted(host.gpus.values(), key=lambda g: g.index):
        last = g.last
        limit = last.get("power_limit")
        t.add_row(str(g.index), spark(g.util, 40, 0, 100), spark(g.power, 24, 0, float(limit) if limit else None),
                  f"{fmt_bytes(last.get('mem_used'))}", f"{fmt_num(last.get('temp'), 0)}°C",
                  fmt_num(last.get("sm_clock"), 0),
                  f"{fmt_bytes(last.get('pcie_tx'))}/s {fmt_bytes(last.get('pcie_rx'))}/s")
    return t


class StatsView(View):
    DOMAINS = (STATS, ALLREDUCE)

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="history")
            yield Static(id="sweep")
            yield Static(id="trace")

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        if not domains or STATS in domains:
            if host.gpus:
                load = Text(f"host load1 {spark(host.load, 60)}", style="cyan")
                self.query_one("#history", Static).update(Group(history_table(host), load))
            else:
                reason = f" ({host.stats_reason})" if host.stats_reason else ""
                self.query_one("#history", Static).update(Text(f"No GPU samples{reason}", style="dim"))
        if not domains or ALLREDUCE in domains:
            self.query_one("#sweep", Static).update(sweep_chart(host.allreduce.get("sweep", [])))
            self.query_one("#trace", Static).update(
                generic_table(host.allreduce.get("trace", []), "AllReduce share of decode time (trace)"))
