"""Overview screen: one host at a glance — GPUs with sparklines, host load, running jobs, the
latest compat findings and notes."""

from __future__ import annotations

from rich.console import Group
from rich.table import Column, Table
from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from console.tui.model import (
    CONNECTION,
    JOBS,
    NOTES_DOMAIN,
    PROBES,
    STATS,
    ConsoleState,
    HostState,
    JobState,
)
from console.tui.quiet import set_content, text_shape
from console.tui.render import ALERT_MARK, fmt_num, meter, right, spark, titled_table
from console.tui.shown import plain
from console.tui.table_lines import FastTable, TableVisual
from console.tui.widgets.common import View, panels
from pipeline.units import fmt_bytes

SPARK = 24
SEVERITY_STYLE = {"error": "bold red", "critical": "bold red", "warning": "yellow", "info": "cyan"}


def _cell(bar: tuple[str, str], label: str) -> Text:
    text = Text(bar[0], style=bar[1])
    text.append(f" {label}")
    return text


def gpu_table(host: HostState, width: int = SPARK, narrow: bool = False) -> Table:
    """nvitop-style rows: meters on fixed scales (0-100 %, memory total, power limit) coloured by
    threshold, the processes holding GPU memory under each GPU, and, when there is room, the
    utilisation history on its fixed 0-100 scale."""
    t = titled_table(None, *(Column(c, no_wrap=True) for c in ("GPU", "util", "memory", "power")),
                     right("temp", no_wrap=True), expand=True)
    meter_w = 8 if narrow else 12
    if not narrow:
        t.add_column("util 0-100 % history", no_wrap=True)
    marked = host.alerted_gpus()
    for g in sorted(host.gpus.values(), key=lambda g: g.index):
        last = g.last
        util = g.util[-1] if g.util else None
        used, total = _opt(last.get("mem_used")), _opt(last.get("mem_total"))
        power, limit = (g.power[-1] if g.power else None), _opt(last.get("power_limit"))
        name = f"{g.index} {g.name.removeprefix('NVIDIA ')}"[:14]
        cells: list[Text | str] = [
            Text(f"{name} {ALERT_MARK}", style="bold red") if g.index in marked else name,
            _cell(meter(util, 100, meter_w), f"{fmt_num(util, 0):>3}%"),
            _cell(meter(used, total, meter_w), f"{_gib(used)}/{_gib(total)}G"),
            _cell(meter(power, limit, meter_w), f"{fmt_num(power, 0)}W"),
            f"{fmt_num(last.get('temp'), 0)}°C",
        ]
        if not narrow:
            cells.append(Text(spark(g.util, width, 0, 100), style="cyan"))
        t.add_row(*cells)
        procs = last.get("procs")
        for proc in procs if isinstance(procs, list) else []:
            if not isinstance(proc, dict):
                continue
            mem = _opt(proc.get("mem_used"))
            row: list[Text | str] = [Text(f"  └ {proc.get('pid', '?')}", style="dim"),
                   Text(str(proc.get("name") or "")[:14], style="dim"),
                   _cell(meter(mem, total, meter_w), f"{_gib(mem)}G" if mem is not None else "n/a"), "", ""]
            if not narrow:
                row.append("")
            t.add_row(*row)
    return t


def _opt(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _gib(v: float | None) -> str:
    return fmt_bytes(v, "GiB", 0 if v is not None and v >= 10 * 2**30 else 1)


def host_line(host: HostState) -> Text:
    text = Text()
    if host.stats_source == "none" or (not host.gpus and host.stats_source):
        text.append(f"no GPU stats ({host.stats_reason or host.stats_source})  ", style="yellow")
    elif not host.stats_source:
        text.append("no stats yet  ", style="dim")
    text.append(f"cpu {fmt_num(host.cpu, 0)}%  ")
    text.append(f"mem {fmt_bytes(host.mem_used)} / {fmt_bytes(host.mem_total)}  ")
    text.append(f"load {fmt_num(host.load[-1] if host.load else None, 2)} ")
    text.append(spark(host.load, SPARK, 0, max(4.0, max(host.load, default=0.0))), style="cyan")  # fixed floor
    return text


def findings_table(findings: list[dict[str, object]], limit: int | None = None, narrow: bool = False) -> Table:
    """Severity, finding, fix; narrow, the fix goes under its finding instead of a third column."""
    t = titled_table(None, Column("severity" if not narrow else "sev", no_wrap=True),
                     Column("finding" if not narrow else "finding → fix", ratio=3), expand=True)
    if not narrow:
        t.add_column("fix", ratio=2)
    for f in findings[:limit]:
        sev = str(f.get("severity") or "info")
        fix = f.get("fix")
        if isinstance(fix, dict):  # the advisor's {kind, text}
            fix = f"{fix.get('text', '')} ({fix.get('kind')})" if fix.get("kind") else fix.get("text")
        title = str(f.get("title") or f.get("detail") or f.get("message") or f.get("rule") or "")
        if narrow:
            text = Text(title)
            text.append(f"\n→ {fix or '-'}", style="dim")
            t.add_row(Text(sev[:4], style=SEVERITY_STYLE.get(sev, "")), text)
        else:
            t.add_row(Text(sev, style=SEVERITY_STYLE.get(sev, "")), title, str(fix or "-"))
    return t


def jobs_table(running: list[JobState]) -> Table:
    """The running jobs, one line each: the last line takes the room the others leave, cut
    with an ellipsis (FastTable draws it line by line: redrawn 4 times a second while a job
    prints)."""
    jobs = titled_table("Running jobs", *(Column(c, no_wrap=True) for c in ("run", "name", "pid", "lines")),
                        Column("last line", no_wrap=True, overflow="ellipsis", ratio=1), expand=True)
    for j in running:
        last = j.tail.line(len(j.tail) - 1) if len(j.tail) else ""
        jobs.add_row(plain(j.run_id[-22:]), plain(j.name.removeprefix("pipeline-")),
                     str(j.pid or "-"), str(j.tail.total),
                     plain(last[:60]))  # the box's raw line: drawn, not obeyed
    return jobs


class OverviewView(View):
    DOMAINS = (STATS, JOBS, PROBES, NOTES_DOMAIN, CONNECTION)

    def compose(self) -> ComposeResult:
        yield panels("alerts", "gpus", "hostline", "jobs", "findings", "notes")

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        n = len(host.gpus)
        narrow = self.app.size.width < 100
        width = self.app.size.width
        procs = sum(len(p) if isinstance(p := g.last.get("procs"), list) else 0
                    for g in host.gpus.values())
        self.show_alerts(host, width)
        marks = tuple(sorted(host.alerted_gpus()))
        gpus = self.query_one("#gpus", Static)
        set_content(gpus, lambda: (
            TableVisual(gpus, Text(f"GPUs ({n})", style="bold underline"),
                        FastTable(gpu_table(host, SPARK, narrow))) if n
            else Text("GPUs: none reported" + (" (stats start when the host connects: 1, c)"
                                               if self.live and not host.stats_source else ""), style="bold")),
            shape=(n, procs, narrow, width, marks))
        hostline = host_line(host)
        set_content(self.query_one("#hostline", Static), lambda: hostline,
                    shape=text_shape(hostline.plain, width), key=hostline.markup)
        running = host.running_jobs()
        jobs = self.query_one("#jobs", Static)
        set_content(jobs, lambda: (
            TableVisual(jobs, FastTable(jobs_table(running))) if running else Text("No running jobs", style="dim")),
            shape=(len(running), width))
        findings = host.compat_findings()
        set_content(self.query_one("#findings", Static), lambda: (
            Group(Text("Last compat findings", style="bold underline"), findings_table(findings, 5, narrow))
            if findings else Text("No compat findings yet (run the compat probe: 3, k)"
                                  if self.live else "No compat findings in this recording", style="dim")),
            shape=(repr(findings[:5]), narrow, self.live, width), key=(repr(findings[:5]), narrow, self.live, width))
        notes = [n for n in host.notes if n.level in ("warning", "error")][-3:]
        text = Text()
        for note in notes:
            text.append(f"{note.ts:%H:%M:%S} {note.level}: {note.text}\n",
                        style="red" if note.level == "error" else "yellow")
        set_content(self.query_one("#notes", Static), lambda: text, shape=text.markup,
                    key=text.markup)
