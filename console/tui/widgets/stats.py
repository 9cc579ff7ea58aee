"""Stats / AllReduce screen: per-GPU history, the bus-bandwidth sweep as a bar chart and the
trace's share-of-decode table. AllReduce rows come from the stats engineer's producers, so
columns are read from the rows rather than assumed (size/busbw keys are looked up by name)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Column, Table
from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from console.tui.model import ALLREDUCE, STATS, ConsoleState, HostState
from console.tui.quiet import set_content
from console.tui.render import ALERT_MARK, fmt_num, hbar, right, spark, titled_table
from console.tui.table_lines import FastTable, TableVisual
from console.tui.widgets.charts import Chart, ChartRow, draw_gpus
from console.tui.widgets.common import View, panels
from pipeline.units import fmt_bytes

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
        return generic_table(rows, "AllReduce sweep (console allreduce --host H)")
    top = max(b for _, b in points) or 1.0
    t = titled_table("AllReduce bus bandwidth by message size", right("size"),
                     Column("busbw", no_wrap=True), right())
    for size, bw in points:
        t.add_row(fmt_bytes(size) if isinstance(size, (int, float)) else str(size),
                  Text(hbar(bw, top, width), style="cyan"), f"{fmt_bytes(bw)}/s")
    return Group(t)


def generic_table(rows: list[dict[str, Any]], title: str) -> Table | Text:
    if not rows:
        return Text(f"{title}: no data yet", style="dim")
    # every key of the rows in first-seen order (rows from other engineers' producers)
    cols = [k for k in dict.fromkeys(k for r in rows for k in r) if k != "summary"]
    t = titled_table(title, *cols)
    for r in rows:
        t.add_row(*(fmt_num(r.get(c), 2) if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols))
    return t


def history_table(host: HostState, narrow: bool = False) -> Table:
    """Per-GPU history on fixed scales (util 0-100 %, power 0-limit), labelled with the scale
    and the latest value, so a load of 0.5 never looks full."""
    w = 16 if narrow else 32
    cols = ["GPU", "util % (0-100)", "power W (0-limit)", "mem", "temp"]
    if not narrow:
        cols += ["sm MHz", "pcie tx/rx"]
    t = titled_table("GPU history (oldest → newest)", *(Column(c, no_wrap=True) for c in cols))
    marked = host.alerted_gpus()
    for g in sorted(host.gpus.values(), key=lambda g: g.index):
        last = g.last
        limit = last.get("power_limit")
        util = Text(spark(g.util, w, 0, 100), style="cyan")
        util.append(f" {fmt_num(g.util[-1] if g.util else None, 0):>3}")
        power = Text(spark(g.power, w // 2, 0, float(limit) if limit else None), style="magenta")
        power.append(f" {fmt_num(g.power[-1] if g.power else None, 0)}/{fmt_num(limit, 0)}")
        index: Text | str = Text(f"{g.index} {ALERT_MARK}", style="bold red") if g.index in marked else str(g.index)
        row: list[Text | str] = [index, util, power, f"{fmt_bytes(last.get('mem_used'))}",
                                 f"{fmt_num(last.get('temp'), 0)}°C"]
        if not narrow:
            row += [fmt_num(last.get("sm_clock"), 0),
                    f"{fmt_bytes(last.get('pcie_tx'))}/s {fmt_bytes(last.get('pcie_rx'))}/s"]
        t.add_row(*row)
    return t


def host_history(host: HostState, narrow: bool = False) -> Table:
    """CPU, memory and load history: all a host without GPUs has, and worth seeing on one with."""
    w = 24 if narrow else 48
    t = titled_table("Host history (oldest → newest)",
                     *(Column(c, no_wrap=True) for c in ("", "history", "now")))
    mem = (f"{fmt_bytes(host.mem_used)} / {fmt_bytes(host.mem_total)}" if host.mem_total else "-")
    top_load = max(4.0, max(host.load, default=0.0))  # fixed floor: a load of 0.5 is not a full bar
    t.add_row("cpu % (0-100)", Text(spark(host.cpu_history, w, 0, 100), style="green"),
              f"{fmt_num(host.cpu, 0)}%")
    t.add_row("mem % (0-100)", Text(spark(host.mem_history, w, 0, 100), style="yellow"), mem)
    t.add_row(f"load1 (0-{top_load:g})", Text(spark(host.load, w, 0, top_load), style="cyan"),
              fmt_num(host.load[-1] if host.load else None, 2))
    return t


class StatsView(View):
    DOMAINS = (STATS, ALLREDUCE)

    def compose(self) -> ComposeResult:
        yield panels("alerts", "history", ChartRow(Chart("GPU util %", id="chart-gpu-util"),
                                                   Chart("GPU memory %", id="chart-gpu-mem"), id="chart-gpus"),
                     "sweep", "trace")

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        narrow = self.app.size.width < 100
        if not domains or STATS in domains:
            # no-wrap rows: the height changes with the GPU count, not with the values
            width = self.app.size.width
            self.show_alerts(host, width)
            history = self.query_one("#history", Static)
            if host.gpus:
                set_content(history, lambda: TableVisual(
                    history, FastTable(history_table(host, narrow)), FastTable(host_history(host, narrow))),
                    shape=("gpus", len(host.gpus), narrow, width, tuple(sorted(host.alerted_gpus()))))
            elif host.stats_source or host.cpu_history:
                reason = f" ({host.stats_reason})" if host.stats_reason else ""
                set_content(history, lambda: TableVisual(
                    history, Text(f"No GPUs{reason}", style="yellow"), FastTable(host_history(host, narrow))),
                    shape=("no gpus", reason, narrow, width))
            else:
                set_content(self.query_one("#history", Static), lambda: Text(
                    "No stats yet: " + ("they start when the host connects (1, c)" if self.live
                                        else "none in this recording"), style="dim"),
                    shape=("no stats", self.live, width))
            row = self.query_one("#chart-gpus", ChartRow)
            shown = draw_gpus(self.query_one("#chart-gpu-util", Chart), self.query_one("#chart-gpu-mem", Chart), host)
            if row.display != shown:
                row.display = shown
        if not domains or ALLREDUCE in domains:
            # Shown again with the same results (the sweep and the trace change once a run, not
            # with the stats): no re-render and no screen reflow on each switch to this screen.
            sweep, trace = host.allreduce.get("sweep", []), host.allreduce.get("trace", [])
            set_content(self.query_one("#sweep", Static), lambda: sweep_chart(sweep, 20 if narrow else 40),
                        shape=repr(sweep), key=(repr(sweep), narrow))
            set_content(self.query_one("#trace", Static), lambda: generic_table(
                trace, "AllReduce share of decode time (trace)"), shape=repr(trace), key=repr(trace))
