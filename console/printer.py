"""Headless output: one human line per event, or the event itself as JSON (--json).

How each kind reads is written once, here: RULES maps a kind to the function that makes the
line's text after its time and host from the payload dict (None: not shown). The per-event
printer (`human_line`, live commands) and `replay --print`'s segment printer
(console/sessions/human.py, which decodes a segment's payloads in one call) both call these
functions; tests/console/sessions/test_printer_paths.py holds the two to the same bytes on
every kind of the schema table.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import IO, Any

from pipeline.units import fmt_bytes
from remote.spine import events as ev
from remote.spine.events import Event
from remote.spine.sanitize import visible

# Lines a pipeline stage prints for the console (pipeline/progress.py); they also arrive as
# stage.* events, so the human printer does not show them twice.
STAGE_RECORD_PREFIX = "@@eagle3 "
# Uploads under this are the console's own probes and helpers, sent on a first command in a
# second or less: said by the command's result, not line by line.
BIG_UPLOAD = 1 << 20

Rule = Callable[[str, dict[str, Any]], "str | None"]


def _fmt_num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def job_head(run_id: str) -> str:
    """What a job line shows before its text; a log block's lines share it."""
    return f"{run_id[:20]}| "


def job_line_text(run_id: str, text: str) -> str | None:
    """A job line as shown; None for a stage record (its stage events say it). replay --print's
    fast path (console/sessions/human.py) shows a checked record's line by this rule too."""
    return None if text.startswith(STAGE_RECORD_PREFIX) else job_head(run_id) + text


def _job_line(kind: str, p: dict[str, Any]) -> str | None:
    return job_line_text(p.get("run_id", ""), str(p.get("text", "")))


def _progress(kind: str, p: dict[str, Any]) -> str | None:
    done, total = p.get("done"), p.get("total")
    frac = f" {100 * done / total:5.1f}%" if isinstance(done, (int, float)) and total else ""
    rate = p.get("rate")
    unit = p.get("unit", "")
    extra = f" {_fmt_num(rate)} {unit}/s" if rate else ""
    if not _EXTRAS.isdisjoint(p):  # most records carry none: one look, not one a field
        extra += _extras(p)
    return f"{p.get('stage', '?')}: {done}/{total} {unit}{frac}{extra}"


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _write_rate(v: Any, p: dict[str, Any]) -> str | None:
    mb = f" ({fmt_bytes(p['write_mb_s'] * 1e6)}/s)" if _num(p.get("write_mb_s")) else ""
    return f"write {_fmt_num(v)} tok/s{mb}"


def _writer_waits(v: Any, p: dict[str, Any]) -> str | None:
    if not v:  # a writer that kept up: nothing to say
        return None
    secs = f" {_fmt_num(p['writer_wait_s'])} s" if _num(p.get("writer_wait_s")) else ""
    return f"waited on the writer {_fmt_num(v)}x{secs}"


# The numbers a stage may add to its progress (pipeline/progress.py) that the line shows, in
# the order shown, each written once: (field, after the semicolon, how it reads). A field reads
# only when it is a number; its rule may read a field that qualifies it (write_mb_s,
# writer_wait_s) or say nothing (None). Those before the semicolon follow the rate (", X");
# those after it are joined by commas. A stage that generates (prepare regenerating answers)
# adds its tokens/s and an ETA; the extract stage its capture and writer rates and the captures
# that waited on the writer (pipeline/write_pool.py). Records of other stages and of older
# boxes have none and read as before.
_EXTRA_RULES: tuple[tuple[str, bool, Callable[[Any, dict[str, Any]], str | None]], ...] = (
    ("tokens_per_s", False, lambda v, p: f", {_fmt_num(v)} tokens/s"),
    ("eta_s", False, lambda v, p: f", ETA {_fmt_num(v)} s"),
    ("capture_tok_s", True, lambda v, p: f"capture {_fmt_num(v)} tok/s"),
    ("write_tok_s", True, _write_rate),
    ("writer_waits", True, _writer_waits),
)
# What `_progress` looks for before it reads them: most records carry none.
_EXTRAS = frozenset(field for field, _, _ in _EXTRA_RULES)


def _extras(p: dict[str, Any]) -> str:
    """The `_EXTRA_RULES` fields a record carries, as its progress line shows them."""
    extra, parts = "", []
    for field, after, rule in _EXTRA_RULES:
        v = p.get(field)
        if _num(v) and (text := rule(v, p)) is not None:
            if after:
                parts.append(text)
            else:
                extra += text
    return extra + ("; " + ", ".join(parts) if parts else "")


def _stats(kind: str, p: dict[str, Any]) -> str | None:
    """Shown by `console stats` (show_stats), and from sessions recorded before samples
    stopped carrying their own text (a `print` flag)."""
    if not p.get(GATES[kind], False):
        return None
    from remote.stats.samples import summary_line

    return f"{kind}: {summary_line(p)}"


def _leveled(level: str) -> Rule:
    return lambda kind, p: f"{level}{p.get('message', '')}"


def _upload(kind: str, p: dict[str, Any]) -> str | None:
    done, total = p.get("done"), p.get("total")
    if type(done) is int and type(total) is int:
        if total < BIG_UPLOAD:
            return None
        if done >= total:
            return f"uploaded {p.get('path', '')} ({fmt_bytes(total)})"
        return f"uploading {p.get('path', '')}: {100 * done // total}% of {fmt_bytes(total)}"
    return _default(kind, p)


def _patch_verified(kind: str, p: dict[str, Any]) -> str | None:
    if p.get("drift"):
        return None  # a recreated container: said once, as the warning that names it
    return _default(kind, p)


def _alert(kind: str, p: dict[str, Any]) -> str | None:
    """An incident, loud: what happened and what to do (remote/stats/alerts.py RULES)."""
    advice = p.get("advice")
    return f"ALERT {p.get('rule', '?')}: {p.get('message', '')}" + (f" -- {advice}" if advice else "")


def _marker(kind: str, p: dict[str, Any]) -> str | None:
    return f"-- {p.get('label', '')} --"


def _default(kind: str, p: dict[str, Any]) -> str | None:
    summary = p.get("summary") or p.get("message")
    if summary:
        return f"{kind}: {summary}"
    short = json.dumps(p, separators=(",", ":"), default=str)
    if len(short) > 160:
        short = short[:157] + "..."
    return f"{kind} {short}"


# Kinds whose line shows only when this payload field is true (their rule says so first): a
# printer may read only that field of the others. Stats samples: `console stats` sets it, and
# sessions recorded before samples stopped carrying their own text have it.
GATES: dict[str, str] = {ev.STATS_SAMPLE: "print"}

# How each kind reads; a kind not here reads by its summary (or message), else its payload.
RULES: dict[str, Rule] = {
    ev.JOB_LINE: _job_line,
    ev.STAGE_PROGRESS: _progress,
    ev.STATS_SAMPLE: _stats,
    ev.STATS_ALERT: _alert,
    ev.CONSOLE_INFO: _leveled(""),
    ev.CONSOLE_WARNING: _leveled("warning: "),
    ev.CONSOLE_ERROR: _leveled("error: "),
    ev.UPLOAD_PROGRESS: _upload,
    ev.PATCH_VERIFIED: _patch_verified,
    ev.MARKER: _marker,
}


def host_part(host: str) -> str:
    """What follows a line's time of day (`HH:MM:SS`): the host in brackets, if any."""
    return f" [{host}] " if host else " "


def human_line(event: Event, *, show_stats: bool = False) -> str | None:
    """None for events too chatty for a terminal (they stay in the session file). Stats samples
    are shown by `console stats` (show_stats)."""
    p = event.payload
    if show_stats and event.kind == ev.STATS_SAMPLE:
        p = {**p, GATES[ev.STATS_SAMPLE]: True}
    text = RULES.get(event.kind, _default)(event.kind, p)
    return None if text is None else event.ts.strftime("%H:%M:%S") + host_part(event.host) + text


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
