"""`console report SESSION`: one self-contained HTML page of a recorded run, to hand to a colleague.

The session is folded exactly as the TUI folds it (console/tui/model.py's ConsoleState, the chart
series of console/tui/chart_data.py), so the page shows what the console showed. Sections: the
session and its hosts with their environments (the env probe), the alerts the stats raised, the pipeline's stages with
their times, outputs and results, the loss curve, offline vs served acceptance per position,
throughput and speedup vs concurrency with the crossover, bench watch, GPU history, the patch
state, and the commands that produced them (each job's argv, as launched on the box).
Every text from the session is HTML-escaped: it came from other machines.
"""

from __future__ import annotations

import html
import shlex
import warnings as warnings_module
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from console.report import figures
from console.sessions.reader import SessionReader
from console.tui import chart_data as cd
from console.tui.model import ConsoleState, HostState
from console.tui.render import fmt_pct, fmt_sig
from pipeline.stages import EVALUATE
from pipeline.units import fmt_bytes
from remote.spine.sanitize import visible

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1180px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; } td, th { border: 1px solid #ddd; padding: 3px 8px;
 text-align: left; vertical-align: top; font-size: .9em; } th { background: #f3f3f3; }
figure { margin: .8em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption, .none { color: #666; font-size: .9em; } code, pre { font-size: .85em; }
pre { background: #f6f6f6; padding: .5em; overflow-x: auto; white-space: pre-wrap; }
"""


def fold(path: str | Path, warnings: list[str] | None = None) -> tuple[Any, ConsoleState, str]:
    """The session's header, its state at the end (folded record by record) and what it says
    of its secrets (the note replay's header line gives). A damaged record is skipped by the
    reader (each judged by its kind's schema, docs/sessions.md) and its one-line warning added
    to `warnings`."""
    with SessionReader(path) as reader:
        header = reader.header
        state = ConsoleState(header.hosts)
        for record in reader.records():
            state.apply_batch(record)
        note = reader.redaction_note()
        if warnings is not None:
            warnings.extend(reader.warning_summary())
    return header, state, note


def _e(value: Any) -> str:
    """Escaped for HTML, and drawn (`visible`): a session's text came from other machines,
    and an ESC or BEL kept raw would reach whoever cats or greps the page."""
    return html.escape("\n".join(map(visible, str(value).split("\n"))), quote=True)


def _table(head: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return ""
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows]
    return "".join(out) + "</table>"


def _figure(uri: str | None, name: str, caption: str, missing: str) -> str:
    if uri is None:
        return f'<p class="none" data-missing-chart="{_e(name)}">{_e(missing)}</p>'
    return (f'<figure><img id="chart-{_e(name)}" class="chart" alt="{_e(caption)}" src="{uri}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _env(host: HostState) -> list[list[Any]]:
    env = host.probes.get("env") or {}
    if not env:
        return [["environment", "no env probe in this session"]]
    rows: list[list[Any]] = []
    py = env.get("python")
    if isinstance(py, dict):
        rows.append(["python", f"{py.get('version', '?')} ({py.get('executable', '?')})"])
    packages = env.get("packages")
    if isinstance(packages, dict):
        rows += [[name, v.get("version") if isinstance(v, dict) else v] for name, v in sorted(packages.items())]
    gpu = env.get("gpu")
    if isinstance(gpu, dict):
        listed = gpu.get("gpus")
        gpus: list[Any] = listed if isinstance(listed, list) else []
        names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict) and g.get("name")})
        rows.append(["GPUs", f"{len(gpus)} {', '.join(names)} (source {gpu.get('source', '?')})".strip()])
    return rows


def _outputs(outputs: Any) -> str:
    items: list[Any] = outputs if isinstance(outputs, list) else [] if outputs is None else [outputs]
    if not items:
        return "-"
    sizes = [o.get("bytes") or o.get("size") for o in items if isinstance(o, dict)]
    total = sum(s for s in sizes if isinstance(s, (int, float)))
    first = ", ".join(str(o.get("path", o)) if isinstance(o, dict) else str(o) for o in items[:3])
    more = f" and {len(items) - 3} more" if len(items) > 3 else ""
    return f"{len(items)} file{'s' if len(items) != 1 else ''}{f', {fmt_bytes(total)}' if total else ''}: {first}{more}"


# A stage's numbers as a reader wants them: not `head` (which head the last progress record was
# measuring, not a result) nor per-position lists (the acceptance chart shows those).
_NOT_RESULTS = ("per_position", "head")


# Rates (fractions) among a stage's numbers, shown as percentages.
_RATES = ("rate", "acc_0")


def _result(metrics: dict[str, Any]) -> str:
    return ", ".join(f"{k} {fmt_pct(v) if k in _RATES else fmt_sig(v)}"
                     for k, v in metrics.items() if k not in _NOT_RESULTS)


def _stages(host: HostState) -> str:
    rows = [[st.name, st.status, f"{fmt_sig(st.seconds)} s" if st.seconds is not None else "-",
             f"{st.done:g}/{st.total:g} {st.unit}".strip() if st.total else "-",
             _outputs(st.outputs), _result(st.metrics)]
            for st in host.ordered_stages()]  # set-up steps (demo-setup) first, as they ran
    return _table(["stage", "status", "time", "progress", "outputs", "result"], rows) or \
        '<p class="none">No pipeline stages in this session.</p>'


def _patches(host: HostState) -> str:
    rows = [[ps.file, ps.status, ", ".join(ps.in_effect) or "-", ps.sha256[:16] or "-", ps.refused or ""]
            for ps in host.patches.values()]
    return _table(["file", "state", "recipes in effect", "sha256", "refused"], rows) or \
        '<p class="none">No patch planned or applied in this session.</p>'


def _alerts(host: HostState) -> str:
    """A row per incident the alert rules recorded (stats.alert; docs/health.md)."""
    rows = [[f"{a['ts']:%Y-%m-%d %H:%M:%S}" if hasattr(a.get("ts"), "strftime") else "",
             a.get("rule"), "-" if a.get("gpu") is None else a.get("gpu"), a.get("message"), a.get("advice")]
            for a in host.alerts]
    table = _table(["time (UTC)", "alert", "GPU", "what happened", "what to do"], rows)
    return (f'<div id="alerts">{table}</div>' if table
            else '<p class="none" id="no-alerts">No alert in this session.</p>')


def _commands(host: HostState) -> str:
    """The jobs as launched, then each stage's own command (the box runner starts those)."""
    lines = [f"# {j.run_id} ({j.state}{'' if j.returncode is None else f', rc {j.returncode}'})\n"
             + shlex.join(j.argv) for j in host.jobs.values() if j.argv]
    lines += [f"# stage {st.name} ({st.status}{f', run {st.run_id}' if st.run_id else ''})\n"
              + shlex.join(st.argv) for st in host.stages.values() if st.argv]
    return (f"<pre>{_e(chr(10).join(lines))}</pre>" if lines
            else '<p class="none">No job or stage was started in this session.</p>')


def _host_section(host: HostState, warnings: list[str]) -> str:
    def draw(chart: Callable[..., str | None], *series: Any) -> str | None:
        """The chart, or None (said in words) when matplotlib cannot draw its values (a loss
        of 1e308 overflows the axis): a warning, not a crash."""
        try:
            with np.errstate(all="ignore"), warnings_module.catch_warnings():
                warnings_module.simplefilter("ignore")
                return chart(*series)
        except (ValueError, OverflowError, FloatingPointError) as exc:
            figures.close_all()
            warnings.append(f"host {visible(host.name)}: the {chart.__name__.replace('_', ' ')} "
                            f"chart was left out: its values cannot be drawn ({exc})")
            return None

    st = host.stages.get(EVALUATE)
    offline = cd.offline_per_position(st.metrics if st is not None else {})
    served, where = cd.served_per_position(host.bench_points)
    conc = cd.concurrency_series(host.bench_points, host.bench_summary)
    parts = [f"<h2>Host {_e(host.name)}</h2>", _table(["", ""], _env(host)),
             "<h3>Alerts</h3>", _alerts(host),
             "<h3>Stages</h3>", _stages(host),
             "<h3>Training loss</h3>",
             _figure(draw(figures.loss_curve, host.charts.loss), "loss", f"{len(host.charts.loss)} points "
                     "from the train stage's progress records", "No training loss in this session."),
             "<h3>Acceptance per draft position: offline vs served</h3>",
             _figure(draw(figures.acceptance_per_position, offline, served, where), "acceptance",
                     "offline: the evaluate stage; served: vLLM's spec-decode counters",
                     "No acceptance per position in this session (evaluate stage or bench run)."),
             "<h3>Throughput and speedup vs concurrency</h3>" if conc.speedup
             else "<h3>Throughput vs concurrency</h3>",
             _figure(draw(figures.speedup_vs_concurrency, conc), "speedup" if conc.speedup else "throughput",
                     conc.verdict,
                     "No bench points in this session (console bench run)."),
             _table(["label", "concurrency", "output tok/s", "acceptance rate", "mean length"],
                    [[p.get("label"), p.get("concurrency"), fmt_sig(p.get("output_tok_s")),
                      fmt_pct((p.get("acceptance") or {}).get("rate")),
                      fmt_sig((p.get("acceptance") or {}).get("mean_length"))]
                     for p in host.bench_points]),
             ]
    grid = cd.matrix_grid(host.matrix_cells, host.matrix)
    if grid.columns:
        parts += ["<h3>Speculation matrix</h3>",
                  _figure(draw(figures.matrix_speedups, grid), "matrix",
                          "console bench matrix: each (draft, K) server's output tok/s over the "
                          "baseline's at the same temperature and concurrency", "")]
        parts += [f"<p><b>{_e(line)}</b></p>" for line in grid.recommendations]
        parts.append(_table(["draft", "T", "concurrency", "tok/s", "acceptance length",
                             "acceptance rate", "speedup"],
                            [[c.get("name"), c.get("temperature"), c.get("concurrency"),
                              fmt_sig(c.get("tok_s")), fmt_sig(c.get("acceptance_length")),
                              fmt_pct(c.get("acceptance_rate")), fmt_sig(c.get("speedup"))]
                             for c in host.matrix_cells.values()]))
    if host.charts.watch:
        parts += ["<h3>Acceptance over time</h3>",
                  _figure(draw(figures.acceptance_over_time, list(host.charts.watch)), "watch",
                          f"{len(host.charts.watch)} bench watch windows", "")]
    gpus = cd.gpu_series(host.charts)
    if gpus:
        parts += ["<h3>GPUs</h3>", _figure(draw(figures.gpu_history, gpus), "gpus",
                                           "per-GPU stats, one point a second", "")]
    parts += ["<h3>Patch state</h3>", _patches(host), "<h3>Commands</h3>", _commands(host)]
    return "\n".join(parts)


#: The mark `console report` knows its own earlier page by (rewritten without --force):
#: in the page's first bytes, before anything the session supplies.
GENERATOR = '<meta name="generator" content="eagle3-console report">'


def render(path: str | Path, warnings: list[str] | None = None) -> str:
    """The page; the session's damaged records (skipped) and charts that could not be drawn
    are added to `warnings`, one line each."""
    warnings = warnings if warnings is not None else []
    header, state, secrets = fold(path, warnings)
    hosts = [h for h in state.hosts.values() if h.last_event is not None] or list(state.hosts.values())
    title = f"EAGLE-3 console report: {Path(path).name}"
    listed = ", ".join(dict.fromkeys(visible(h) for h in header.hosts))  # each host once
    meta = _table(["session", "started (UTC)", "hosts", "console", "events", "secrets"],
                  [[Path(path).name, f"{header.started:%Y-%m-%d %H:%M:%S}", listed,
                    header.console_version, f"{state.events_seen:,}", secrets or "-"]])
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">{GENERATOR}<title>{_e(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>{meta}"
            + "".join(_host_section(h, warnings) for h in hosts)
            + f"<p class=\"none\">Written by <code>console report {_e(Path(path).name)}</code> from the "
              "recorded session; replay it with <code>console replay</code>.</p></body></html>")
