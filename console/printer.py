"""Headless output: one human line per event, or the event itself as JSON (--json)."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from console.tui.render import fmt_bytes
from remote.spine import events as ev
from remote.spine.events import Event
from remote.spine.sanitize import visible

# Lines a pipeline stage prints for the console (pipeline/progress.py); they also arrive as
# stage.* events, so the human printer does not show them twice.
STAGE_RECORD_PREFIX = "@@eagle3 "
# Uploads under this are the console's own probes and helpers, sent on a first command in a
# second or less: said by the command's result, not line by line.
BIG_UPLOAD = 1 << 20


def _fmt_num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def human_line(event: Event, *, show_stats: bool = False) -> str | None:
    """None for events too chatty for a terminal (they stay in the session file). Stats samples
    are shown by `console stats` (show_stats), and from sessions recorded before samples stopped
    carrying their own text (a `print` flag)."""
    p = event.payload
    t = event.ts.strftime("%H:%M:%S")
    host = f"[{event.host}] " if event.host else ""
    k = event.kind
    if k == ev.JOB_LINE:
        if str(p.get("text", "")).startswith(STAGE_RECORD_PREFIX):
            return None  # a pipeline stage record: shown as its stage.* event instead
        return f"{t} {host}{p.get('run_id', '')[:20]}| {p.get('text', '')}"
    if k == ev.STAGE_PROGRESS:
        done, total = p.get("done"), p.get("total")
        frac = f" {100 * done / total:5.1f}%" if isinstance(done, (int, float)) and total else ""
        rate = p.get("rate")
        unit = p.get("unit", "")
        extra = f" {_fmt_num(rate)} {unit}/s" if rate else ""
        return f"{t} {host}{p.get('stage', '?')}: {done}/{total} {unit}{frac}{extra}"
    if k == ev.STATS_SAMPLE:
        if not (show_stats or p.get("print", False)):
            return None
        from remote.stats.samples import summary_line

        return f"{t} {host}{k}: {summary_line(p)}"
    if k in (ev.CONSOLE_INFO, ev.CONSOLE_WARNING, ev.CONSOLE_ERROR):
        level = {"console.info": "", "console.warning": "warning: ", "console.error": "error: "}[k]
        return f"{t} {host}{level}{p.get('message', '')}"
    if k == ev.UPLOAD_PROGRESS:
        done, total = p.get("done"), p.get("total")
        if type(done) is int and type(total) is int:
            if total < BIG_UPLOAD:
                return None
            if done >= total:
                return f"{t} {host}uploaded {p.get('path', '')} ({fmt_bytes(total)})"
            return f"{t} {host}uploading {p.get('path', '')}: {100 * done // total}% of {fmt_bytes(total)}"
    if k == ev.PATCH_VERIFIED and p.get("drift"):
        return None  # a recreated container: said once, as the warning that names it
    if k == ev.MARKER:
        return f"{t} {host}-- {p.get('label', '')} --"
    summary = p.get("summary") or p.get("message")
    if summary:
        return f"{t} {host}{k}: {summary}"
    short = json.dumps(p, separators=(",", ":"), default=str)
    if len(short) > 160:
        short = short[:157] + "..."
    return f"{t} {host}{k} {short}"


class Printer:
    def __init__(self, *, as_json: bool = False, out: IO[str] | None = None,
                 show_stats: bool = False) -> None:
        self.as_json = as_json
        self.show_stats = show_stats
        self.out = out or sys.stdout

    def __call__(self, event: Event) -> None:
        if self.as_json:
            line: str | None = event.to_json()
        else:
            line = human_line(event, show_stats=self.show_stats)
            if line is not None:
                line = visible(line)  # remote text is drawn, never obeyed by the terminal
        if line is not None:
            try:
                self.out.write(line + "\n")
                self.out.flush()
            except BrokenPipeError:  # `console replay x --print | head`
                pass
