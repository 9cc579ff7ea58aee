"""The human printer's line for the common non-log kinds, from a record decoded in a batch.

A real pipeline run records about a third stage.progress and a tenth console.info, stage.*,
job.* and connection events besides its log lines (benchmarks/data/demo-run.jsonl). Each went
through the per-event path, a dict decode, an Event, a strftime and `printer.human_line`,
about 8 us an event here, so a real run replayed at ~0.15 M events per CPU-second where a log
replays at 1 M. Here the same text is made from the fields the batch decode already typed
(console/sessions/decode.py `_Payload`), for the shapes those kinds have when the recorder
writes them; any other shape (a field of an unexpected type, a stats sample to be printed, a
payload without summary) answers SLOW and goes the per-event way, so the text is
`human_line`'s in every case (tests/console/sessions/test_replay_real.py and
tests/console/sessions/test_replay_fast.py compare them). The line is not yet made `visible`:
the caller checks a segment's lines at once.
"""

from __future__ import annotations

from typing import Any

import msgspec

UNSET = msgspec.UNSET


class _Slow:
    """The answer for a record this module does not format (see the module docstring)."""


SLOW: Any = _Slow()
_NUMBER = (int, float)
_LEVEL = {"console.info": "", "console.warning": "warning: ", "console.error": "error: "}
# Kinds `human_line` formats by their own rule, not by summary/message: never here.
OWN_RULE = frozenset({"job.line", "job.lines", "stage.progress", "stats.sample", "marker",
                      "patch.verified",  # a drift flag hides it: human_line decides
                      "upload.progress"})


def human(ts: str, host: str, kind: str, p: Any) -> Any:
    """`human_line`'s text for this record (ts already checked by the caller), None for a
    record it does not show, or SLOW."""
    if kind == "stage.progress":
        return progress(ts, host, p)
    t = ts[11:19]
    h = f"[{host}] " if host else ""
    level = _LEVEL.get(kind)
    if level is not None:
        message = p.message
        if message is UNSET:
            message = ""
        elif type(message) is not str:
            return SLOW
        return f"{t} {h}{level}{message}"
    if kind in OWN_RULE:
        if kind == "marker":
            label = "" if p.label is UNSET else p.label
            if type(label) is str:
                return f"{t} {h}-- {label} --"
        return SLOW
    summary = p.summary
    if type(summary) is str and summary:
        return f"{t} {h}{kind}: {summary}"
    if summary is UNSET or summary is None or summary == "":
        message = p.message
        if type(message) is str and message:
            return f"{t} {h}{kind}: {message}"
    return SLOW


def progress(ts: str, host: str, p: Any) -> Any:
    """A stage.progress record's line (a third of a real run: called from the loop itself)."""
    stage, done, total, unit, rate = p.stage, p.done, p.total, p.unit, p.rate
    if unit is UNSET:
        unit = ""
    if (type(stage) is not str or type(unit) is not str or type(done) not in _NUMBER
            or type(total) not in _NUMBER):
        return SLOW
    frac = f" {100 * done / total:5.1f}%" if total else ""
    if type(rate) is float:  # printer._fmt_num's two cases for a float, and an int's
        extra = (f" {rate:.3g} {unit}/s" if abs(rate) < 1000 else f" {rate:,.0f} {unit}/s"
                 ) if rate else ""
    elif type(rate) is int:
        extra = f" {rate} {unit}/s" if rate else ""
    elif rate is UNSET or rate is None:
        extra = ""
    else:
        return SLOW
    h = f"[{host}] " if host else ""
    return f"{ts[11:19]} {h}{stage}: {done}/{total} {unit}{frac}{extra}"
