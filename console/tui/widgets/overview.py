"""Overview screen: one host at a glance — GPUs with sparklines, host load, running jobs, the
latest compat findings and notes."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.tui.model import (
    CONNECTION,
    JOBS,
    NOTES_DOMAIN,
    PROBES,
    STATS,
    ConsoleState,
    HostState,
)
from console.tui.render import fmt_bytes, fmt_num, spark
from console.tui.widgets.common import View

SPARK = 24
SEVERITY_STYLE = {"error": "bold red", "critical": "bold red", "warning": "yellow", "info": "cyan"}


def gpu_table(host: HostState, width: int = SPARK) -> Table:
    t = Table(expand=True, box=None, header_style="bold")
    for col in ("GPU", "util %", "", "mem %", "", "power W", "", "temp"):
        t.add_column(col, no_wrap=True)
    for g in sorted(host.gpus.values(), key=lambda g: g.index):
        last = g.last
        limit = last.get("power_limit") or (max(g.power) if g.power else 1.0)
        t.add_row(
            f"{g.index} {g.name}"[:22],
            spark(g.util, width, 0, 100), fmt_num(g.util[-1] if g.util else None, 0),
            spark(g.mem, width, 0, 100), fmt_num(g.mem[-1] if g.mem else None, 0),
            spark(g.power, width, 0, float(limit) if limit else None),
            fmt_num(g.power[-1] if g.power else None, 0),
            f"{fmt_num(last.get('temp'), 0)}°C",
        )
    return t


def host_line(host: HostState) -> Text:
    text = Text()
    if host.stats_source == "none" or (not host.gpus and host.stats_source):
        text.append(f"no GPU stats ({host.stats_reason or host.stats_source})  ", style="yellow")
    elif not host.stats_source:
        text.append("no stats yet  ", style="dim")
    text.append(f"cpu {fmt_num(host.cpu, 0)}%  ")
    text.append(f"mem {fmt_bytes(host.mem_used)} / {fmt_bytes(host.mem_total)}  ")
    text.append(f"load {fmt_num(host.load[-1] if host.load else None, 2)} ")
    text.append(spark(host.load, SPARK), style="cyan")
    return text


def findings_table(findings: list[dict[str, object]], limit: int | None = None) -> Table:
    t = Table(expand=True, box=None, header_style="bold")
    t.add_column("severity", no_wrap=True)
    t.add_column("finding", ratio=3)
    t.add_column("fix", ratio=2)
    for f in findings[:limit]:
        sev = str(f.get("severity") or "info")
        fix = f.get("fix")
        if isinstance(fix, dict):  # the advisor's {kind, text}
            fix = f"{fix.get('text', '')} ({fix.get('kind')})" if fix.get("kind") else fix.get("text")
        t.add_row(Text(sev, style=SEVERITY_STYLE.get(sev, "")),
                  str(f.get("title") or f.get("detail") or f.get("message") or f.get("rule") or ""),
                  str(fix or "-"))
    return t


class OverviewView(View):
    DOMAINS = (STATS, JOBS, PROBES, NOTES_DOMAIN, CONNECTION)

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="gpus")
            yield Static(id="hostline")
            yield Static(id="jobs")
            yield Static(id="findings")
            yield Static(id="notes")

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        n = len(host.gpus)
        self.query_one("#gpus", Static).update(
            Group(Text(f"GPUs ({n})", style="bold underline"), gpu_table(host)) if n
            else Text("GPUs: none reported", style="bold"))
        self.query_one("#hostline", Static).update(host_line(host))
        jobs = Table(expand=True, box=None, header_style="bold", title="Running jobs", title_justify="left")
        for col in ("run", "name", "pid", "lines", "last line"):
            jobs.add_column(col, no_wrap=True)
        for j in host.running_jobs():
            last = j.tail.line(len(j.tail) - 1) if len(j.tail) else ""
            jobs.add_row(j.run_id, j.name, str(j.pid or "-"), str(j.tail.total), last[:60])
        self.query_one("#jobs", Static).update(jobs if host.running_jobs() else Text("No running jobs", style="dim"))
        findings = host.compat_findings()
        self.query_one("#findings", Static).update(
            Group(Text("Last compat findings", style="bold underline"), findings_table(findings, 5))
            if findings else Text("No compat findings yet (run the compat probe: 3, k)"
                                  if getattr(self.app, "mode", "live") == "live"
                                  else "No compat findings in this recording", style="dim"))
        notes = [n for n in host.notes if n.level in ("warning", "error")][-3:]
        text = Text()
        for note in notes:
            text.append(f"{note.ts:%H:%M:%S} {note.level}: {note.text}\n",
                        style="red" if note.level == "error" else "yellow")
        self.query_one("#notes", Static).update(text)
