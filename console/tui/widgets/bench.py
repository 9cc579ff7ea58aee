"""Bench screen: the sweep table, acceptance per position, and speedup vs concurrency (each
label's output tokens/s over the baseline label's at the same concurrency)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Column, Table
from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from console.tui.chart_data import matrix_grid, speedups, summary_speedups
from console.tui.model import BENCH, JOBS, STAGES, ConsoleState, HostState
from console.tui.render import fmt_num, fmt_pct, fmt_sig, hbar, right, spark, titled_table
from console.tui.shown import plain
from console.tui.widgets.charts import Chart, ChartRow, draw_acceptance, draw_concurrency, draw_watch
from console.tui.widgets.common import View, panels
from pipeline.stages import EVALUATE
from remote.bench.matrix import failed_line
from remote.serving.roles import ROLES
from remote.spine.sanitize import visible

# n: the requests the point ran (its percentiles are over that many; a p99 of four is their
# maximum), as `console bench run` and vLLM's `completed` report it.
SWEEP_COLUMNS = ("label", "conc", "n", "tok/s", "req/s", "ttft p50", "ttft p99", "tpot p50",
                 "tpot p99", "accept", "mean len")
NARROW_DROP = {"req/s", "ttft p99", "tpot p99"}  # what goes first when the screen is narrow


def sweep_table(points: list[dict[str, Any]], narrow: bool = False) -> Table:
    keep = [c not in NARROW_DROP or not narrow for c in SWEEP_COLUMNS]
    t = titled_table("Sweep", *(right(c) for c, k in zip(SWEEP_COLUMNS, keep, strict=True) if k))
    for p in points:
        raw = p.get("acceptance")
        acc: dict[str, Any] = raw if isinstance(raw, dict) else {}
        cells = (str(p.get("label", "")), str(p.get("concurrency", "")), _count(p),
                 fmt_sig(p.get("output_tok_s")),
                 fmt_sig(p.get("req_s")), fmt_sig(p.get("ttft_p50")), fmt_sig(p.get("ttft_p99")),
                 fmt_sig(p.get("tpot_p50")), fmt_sig(p.get("tpot_p99")),
                 fmt_pct(acc.get("rate")), fmt_sig(acc.get("mean_length")))
        t.add_row(*(c for c, k in zip(cells, keep, strict=True) if k))
    return t


def _count(p: dict[str, Any]) -> str:
    """Requests of the point, and how many failed (their timings are not in the figures)."""
    n, failed = p.get("requests"), p.get("failed")
    if not isinstance(n, int):
        return "-"
    return f"{n} ({failed} failed)" if isinstance(failed, int) and failed else str(n)


def acceptance_chart(points: list[dict[str, Any]], width: int = 30) -> Table | Text:
    latest = next((p for p in reversed(points)
                   if isinstance(p.get("acceptance"), dict) and p["acceptance"].get("per_position")), None)
    if latest is None:
        return Text("Acceptance per position: no speculative points yet", style="dim")
    per = [float(x) if isinstance(x, (int, float)) else None for x in latest["acceptance"]["per_position"]]
    return position_table(list(enumerate(per)), width,
                          f"Acceptance per position ({latest.get('label')}, conc {latest.get('concurrency')})")


def position_table(rates: list[tuple[int, Any]], width: int, title: str | None = None) -> Table:
    """(position, rate) rows as bars; a rate of None is a position with nothing measured."""
    t = titled_table(title, right("pos"), Column("rate", no_wrap=True), right())
    for i, v in rates:
        if v is None:
            t.add_row(str(i), "", "-")
        else:
            t.add_row(str(i), Text(hbar(float(v), 1.0, width), style="green"), fmt_pct(v))
    return t


def speedup_chart(points: list[dict[str, Any]], summary: dict[str, Any] | None = None,
                  width: int = 30) -> Table | Text:
    rows = summary_speedups(summary or {}) or speedups(points)
    if not rows:
        return Text("Speedup vs concurrency: needs a baseline label and a speculative label at the same "
                    "concurrency", style="dim")
    top = max(s for *_, s in rows)
    t = titled_table("Speedup vs concurrency", "label", right("conc"), Column("speedup", no_wrap=True),
                     right())
    for label, conc, s in rows:
        t.add_row(label, str(conc), Text(hbar(s, max(top, 1.0), width), style="magenta"), f"{fmt_sig(s)}x")
    return t


def offline_acceptance(host: HostState, width: int = 30) -> Group | Text:
    """The evaluate stage's acceptance (speculative decoding of held-out prompts with the trained
    head, the same definitions as vLLM's counters): what to expect before serving."""
    st = host.stages.get(EVALUATE)
    m = st.metrics if st is not None else {}
    if not isinstance(m.get("mean_length"), (int, float)):
        return Text("Offline acceptance: no result yet (the pipeline's evaluate stage reports it)",
                    style="dim")
    title = f"Offline acceptance (evaluate): mean length {fmt_sig(float(m['mean_length']))}"
    if isinstance(m.get("rate"), (int, float)):
        title += f", rate {fmt_pct(m['rate'])}"
    if isinstance(m.get("untrained_mean_length"), (int, float)):
        title += f" (untrained head {fmt_sig(float(m['untrained_mean_length']))})"
    per = m.get("per_position")
    rates = [(i, v) for i, v in enumerate(per if isinstance(per, list) else []) if isinstance(v, (int, float))]
    return Group(Text(title, style="bold"), position_table(rates, width))


SERVER_STYLE = {"starting": "bold yellow", "ready": "bold green", "failed": "bold red", "stopped": "dim",
                "exited": "bold red", "running": "green"}
WINDOWS_SHOWN = 6  # live acceptance windows listed (the sparkline keeps the longer history)


def server_rows(host: HostState) -> list[tuple[str, str, str, str]]:
    """(role, state, url, detail) of each server this console knows: from the serve.* events,
    or a serve job found running on connect (started by `console serve` or another console)."""
    rows = []
    for role in ROLES:
        srv = host.servers.get(role)
        job = host.jobs.get(srv.run_id) if srv is not None and srv.run_id else None
        if srv is None:
            job = next((j for j in host.jobs.values() if j.name == f"serve-{role}" and j.running), None)
            if job is not None:
                rows.append((role, "running", "", f"job {job.run_id} (reattached)"))
            continue
        state = srv.state
        if state in ("starting", "ready") and job is not None and not job.running:
            state = "exited"  # the job ended under a server we thought was up
        detail = f"job {srv.run_id}"
        if srv.pid is not None:
            detail += f", pid {srv.pid}"
        if srv.model:
            detail += f", model {srv.model}"
        if state == "ready" and srv.seconds is not None:
            detail += f", answered after {srv.seconds:.0f} s"
        elif state == "starting":
            detail += ", engine loading (30-120 s on a CPU)"
        elif state == "exited" and job is not None:
            detail += f", {job.state}" + (f" rc={job.returncode}" if job.returncode is not None else "")
        rows.append((role, state, srv.url, detail))
    return rows


def servers_panel(host: HostState, live: bool) -> Group | Text:
    rows = server_rows(host)
    if not rows:
        return Text("vLLM servers: none (g serves the trained head, o the baseline)" if live
                    else "vLLM servers: none in this recording", style="dim")
    t = titled_table("vLLM servers", *(Column(c, no_wrap=c != "") for c in ("role", "state", "url", "")))
    for role, state, url, detail in rows:
        t.add_row(role, Text(state, style=SERVER_STYLE.get(state, "")), plain(url), plain(detail))
    parts: list[Table | Text] = [t]
    for role in ROLES:
        srv = host.servers.get(role)
        if srv is not None and srv.state == "failed":
            text = Text(f"{role} server failed: ", style="bold red")
            text.append(visible(srv.error))
            for line in srv.log_tail[-8:]:  # the engine's own last words
                text.append("\n  " + visible(line), style="dim")
            parts.append(text)
    return Group(*parts)


def windows_table(windows: list[dict[str, Any]]) -> Table | Text:
    """Live acceptance, one row per /metrics window: what the server accepted in that window."""
    if not windows:
        return Text("")
    rates = [float(w["acceptance"]["rate"]) for w in windows
             if isinstance(w.get("acceptance"), dict) and isinstance(w["acceptance"].get("rate"), (int, float))]
    t = titled_table(Text.assemble(("Live acceptance per window ", "bold"), (spark(rates, 30, 0, 1), "green")),
                     *(Column(c, justify="right" if c != "per position" else "left", no_wrap=True)
                       for c in ("window", "secs", "drafts", "accept", "mean len", "per position", "acc tok/s")))
    for w in windows[-WINDOWS_SHOWN:]:
        raw = w.get("acceptance")
        acc: dict[str, Any] = raw if isinstance(raw, dict) else {}
        per = acc.get("per_position")
        pos = " ".join(fmt_pct(p) for p in per if isinstance(p, (int, float))) if isinstance(per, list) else ""
        drafts = acc.get("drafts")
        t.add_row(str(w.get("window", "")), fmt_num(w.get("seconds"), 1), fmt_num(drafts, 0),
                  fmt_pct(acc.get("rate")) if drafts else "idle", fmt_sig(acc.get("mean_length")),
                  pos, fmt_sig(w.get("accepted_tok_s")))
    return t


def matrix_panel(host: HostState) -> Group | Text:
    """`console bench matrix`: its progress and ETA while it runs, the speedup of every (draft,
    K) server per temperature and concurrency, and the recommendation per concurrency."""
    grid = matrix_grid(host.matrix_cells, host.matrix)
    m = host.matrix
    if not grid.columns and not m:
        return Text("")
    parts: list[Table | Text] = []
    if not m.get("finished"):
        done, total, eta = m.get("done"), m.get("total"), m.get("eta_s")
        line = f"Matrix running: {done or 0}/{total if total is not None else '?'} cells"
        if isinstance(eta, (int, float)):
            line += f", ETA {eta / 60:.1f} min"
        parts.append(Text(line, style="bold yellow"))
    t = titled_table("Matrix: speedup over no speculation", "draft",
                     *(right(f"T={temp:g} c={c}") for temp, c in grid.columns))
    for name, values in grid.rows:
        t.add_row(name, *(Text("-", style="dim") if v is None else
                          Text(f"{v:.2f}x", style="green" if v >= 1.0 else "red")
                          for v in values))
    parts.append(t)
    parts += [Text(line, style="bold") for line in grid.recommendations]
    parts += [Text(line, style="red") for line in
              filter(None, map(failed_line, host.matrix_cells.values()))]
    split = m.get("time_split")
    if isinstance(split, dict) and split.get("wall"):
        wall = float(split["wall"])
        parts.append(Text("time: " + ", ".join(
            f"{name} {float(split.get(key) or 0) / wall:.0%}" for name, key in
            (("engine starts", "engine_start"), ("warm-up", "warmup"),
             ("measured", "measured"), ("the rest", "rest"))), style="dim"))
    return Group(*parts)


class BenchView(View):
    DOMAINS = (BENCH, STAGES, JOBS)

    def compose(self) -> ComposeResult:
        matrix = Static(id="matrix")
        matrix.display = False  # until a matrix is seen: no empty line on the screen
        # bench-watch, what the running server accepts now, above the sweep: the first thing to see
        # at 80x24
        yield panels(
            "servers", "bench-watch", matrix, Chart("Acceptance over time", id="chart-watch"), "offline",
            Chart("Acceptance per draft position", id="chart-acceptance"), "sweep-table", "acceptance",
            ChartRow(Chart("Output tok/s vs concurrency", id="chart-throughput"),
                     Chart("Speedup vs concurrency", id="chart-speedup"), id="chart-concurrency"),
            "speedup", "bench-summary")

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        pts = host.bench_points
        width = 16 if self.app.size.width < 100 else 30
        servers = self.query_one("#servers", Static)
        servers.display = self.live or bool(server_rows(host))
        servers.update(servers_panel(host, self.live))
        self.query_one("#offline", Static).update(offline_acceptance(host, width))
        self.query_one("#sweep-table", Static).update(
            sweep_table(pts, width < 30) if pts else Text(
                "No benchmark points yet (b runs a sweep against the server)" if self.live
                else "No benchmark points in this recording", style="dim"))
        self.query_one("#acceptance", Static).update(acceptance_chart(pts, width))
        self.query_one("#speedup", Static).update(speedup_chart(pts, host.bench_summary, width))
        summ = host.bench_summary
        self.query_one("#bench-summary", Static).update(
            Text(f"summary: {summ.get('summary') or summ}") if summ else "")
        matrix = self.query_one("#matrix", Static)
        matrix.display = bool(host.matrix or host.matrix_cells)
        matrix.update(matrix_panel(host))
        windows = list(host.bench_watch)
        watch = self.query_one("#bench-watch", Static)
        watch.display = bool(windows)  # no empty line above the sweep before the first window
        watch.update(windows_table(windows))
        self._charts(host)

    def _charts(self, host: HostState) -> None:
        """Each chart shown once it has data; the text it stands for (the per-position and
        speedup bars) then goes, the tables with the exact figures stay."""
        charts = self.query_one("#chart-watch", Chart), self.query_one("#chart-acceptance", Chart)
        has_watch, has_acc = draw_watch(charts[0], host), draw_acceptance(charts[1], host)
        row = self.query_one("#chart-concurrency", ChartRow)
        speedup = self.query_one("#chart-speedup", Chart)
        has_conc, has_speedup = draw_concurrency(self.query_one("#chart-throughput", Chart),
                                                 speedup, host)
        for widget, shown in ((charts[0], has_watch), (charts[1], has_acc), (row, has_conc),
                              (speedup, has_speedup),  # no chart without data
                              (self.query_one("#acceptance", Static), not has_acc),
                              (self.query_one("#speedup", Static), not has_speedup)):
            if widget.display != shown:
                widget.display = shown
