"""The `replay --print` fast path for a real run's segments as it was before issue 30's
template path (commit 21a2846, console/sessions/human_records.py `_fast_records`), frozen
here so benchmarks/replay_real.py measures the old path beside the new one in the same run.
Not used by the console; its helpers are the console's own.
"""

from __future__ import annotations

import gc
import re
from typing import Any, BinaryIO

import msgspec

from console.sessions import human_kinds as kinds
from console.sessions.decode import STAGE_RECORD_PREFIX, UNSET
from console.sessions.human_records import (
    _CONTROLS,
    _all_ts_ok,
    _block_lines,
    _BlockLine,
    printable,
    slow_record,
)
from console.sessions.source import split_events
from remote.spine.sanitize import visible

_LINE_START = b'{"ts":"'
_SEP = b'}\n{"ts":"'
_RECORD_LINES = msgspec.json.Decoder(_BlockLine)
_LEVEL = {"console.info": "", "console.warning": "warning: ", "console.error": "error: "}
# `f" {100 * done / total:5.1f}%"` by tenths of a percent, 0 to 99.9: a lookup where the
# float's format cost ~0.3 us, a third of a stage.progress line. For ints 0 <= done and
# 0 < total below _EXACT, 100 * done / total is the double nearest the quotient and its
# one-decimal format rounds that double; off a tie (1000 * done / total an odd half) the double
# lies on the quotient's side of every rounding boundary (they are 1 / (20 total) from it at
# least, far more than a double's error at these sizes), so the quotient rounded in integers
# gives the same tenths. A tie, 100 % and more, and floats are formatted as before
# (tests/console/sessions/test_replay_print_fast.py compares every done/total up to 2,000 and random ones).
_PERCENT = [f" {k / 10:5.1f}%" for k in range(1000)]
_EXACT = 10**12


def _fast_records(data: bytes, first: int, count: int, bad: list[tuple[int, str]]
                  ) -> str | None:
    """The segment's lines joined (see the module docstring), or None for a segment that is
    not framed as the recorder writes it. `count` is its number of non-blank lines (the
    index's): with `count - 1` separators `}\\n{"ts":"` there is no blank line and every
    newline ends a top-level value (inside one, `}` is never followed by `{`), so decode_lines
    finding `count` values means one per line (it would take `{..} {..}` on one line)."""
    if not (data.startswith(_LINE_START) and data.endswith(b"}\n")
            and data.count(_SEP) == count - 1):
        return None
    try:
        recs = _RECORD_LINES.decode_lines(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    if len(recs) != count or not _all_ts_ok(recs):
        return None
    out: list[str] = []
    append = out.append
    kept: list[int] = []  # lines already made visible (blocks, slow records)
    lines: list[bytes] | None = None
    human, slow, level_of, percent = kinds.human, kinds.SLOW, _LEVEL.get, _PERCENT
    stage_prefix, own_rule = STAGE_RECORD_PREFIX, kinds.OWN_RULE
    for rec in recs:
        kind = rec.kind
        p = rec.payload
        if kind == "job.line":
            text = p.text
            if type(text) is str:
                run_id = p.run_id
                if run_id is None or type(run_id) is str:
                    if not text.startswith(stage_prefix):
                        host = rec.host
                        run_id = run_id[:20] if run_id else ""
                        append(f"{rec.ts[11:19]} [{host}] {run_id}| {text}" if host
                               else f"{rec.ts[11:19]} {run_id}| {text}")
                    continue
        elif kind == "stage.progress":
            stage, done, total, unit, rate = p.stage, p.done, p.total, p.unit, p.rate
            if stage is UNSET:
                stage = "?"
            if unit is UNSET:
                unit = ""
            td, tt, tr = type(done), type(total), type(rate)
            if (type(stage) is str and type(unit) is str and (td is int or td is float)
                    and (tt is int or tt is float)
                    and (tr is float or tr is int or rate is UNSET or rate is None)):
                if not rate:
                    extra = ""
                elif tr is int or -1000 < rate < 1000:  # printer._fmt_num's cases
                    extra = f" {rate:.3g} {unit}/s" if tr is float else f" {rate} {unit}/s"
                else:
                    extra = f" {rate:,.0f} {unit}/s"
                if not total:
                    frac = ""
                elif (td is int and tt is int and 0 <= done < _EXACT and 0 < total < _EXACT):
                    q, r = divmod(1000 * done, total)
                    r += r
                    if r > total:
                        q += 1
                    frac = (percent[q] if r != total and q < 1000
                            else f" {100 * done / total:5.1f}%")
                else:
                    frac = f" {100 * done / total:5.1f}%"
                host = rec.host
                append(f"{rec.ts[11:19]} [{host}] {stage}: {done}/{total} {unit}{frac}{extra}"
                       if host else f"{rec.ts[11:19]} {stage}: {done}/{total} {unit}{frac}{extra}")
                continue
        elif kind == "job.lines":
            texts, run_id = p.texts, p.run_id
            if (texts and p.offsets is not None and len(texts) == len(p.offsets)
                    and type(run_id) is str):
                n = len(out)
                _block_lines(rec.ts, rec.host, run_id, texts, out, False)
                kept.extend(range(n, len(out)))
                continue
        elif kind == "stats.sample":
            if not p.print_:
                continue
        else:
            level = level_of(kind)
            if level is not None:
                message = p.message
                if message is UNSET:
                    message = ""
                if type(message) is str:
                    host = rec.host
                    append(f"{rec.ts[11:19]} [{host}] {level}{message}" if host
                           else f"{rec.ts[11:19]} {level}{message}")
                    continue
            else:
                summary = p.summary
                if type(summary) is str and summary and kind not in own_rule:
                    host = rec.host
                    append(f"{rec.ts[11:19]} [{host}] {kind}: {summary}" if host
                           else f"{rec.ts[11:19]} {kind}: {summary}")
                    continue
                text = human(rec.ts, rec.host, kind, p)
                if text is not slow:
                    if text is not None:
                        append(text)
                    continue
        if lines is None:
            lines = split_events(data)
        i = next(k for k, r in enumerate(recs) if r is rec)  # rare: not counted per record
        n = len(out)
        out.extend(slow_record(lines[i], first + i, bad))
        kept.extend(range(n, len(out)))
    text = "\n".join(out)
    if _unchanged_by_visible(text):
        return text
    keep = set(kept)
    return "\n".join([line if k in keep else visible(line) for k, line in enumerate(out)])


# What `visible` changes, as UTF-8: C0 controls but the newline, and DEL (deleted by one
# translate, with the lead bytes below), C1 controls (U+0080-009F: C2 80-9F), U+061C (D8 9C)
# and the format characters U+200E/F, U+2028-202E (E2 80 ..) and U+2066-2069 (E2 81 ..).
_LEADS = _CONTROLS + b"\xc2\xd8\xe2"
_CHANGED = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xd8\x9c"
                      rb"|\xe2\x80[\x8e\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]")


def _unchanged_by_visible(text: str) -> bool:
    """`visible` would leave every line of `text` as it is: checked on its UTF-8 bytes (a
    translate, about 1 ns a byte, and a search only when a lead byte of what it changes is
    there), where str.isprintable cost 4 ns a character on a segment holding one `×`."""
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape
        return printable(text, False)
    return len(raw.translate(None, _LEADS)) == len(raw) or _CHANGED.search(raw) is None




def print_session_before(reader: Any, out: BinaryIO) -> list[tuple[int, str]]:
    """console/commands/replay.py `print_session` (human lines) as it was: each segment's text
    made as a str by the path above (or the unchanged general paths), then encoded."""
    from console.sessions.human_log import _human_blocks
    from console.sessions.human_records import _BLOCK_KIND, _human_records

    bad: list[tuple[int, str]] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for first, count, data in reader.segment_data():
            if _BLOCK_KIND in data:
                text = _fast_records(data, first, count, bad)
                if text is None:
                    text = "\n".join(_human_records(data, first, bad))
            else:
                text = _human_blocks(data, first, count, bad)
            if text:
                out.write((text + "\n").encode("utf-8", "replace"))
        out.flush()
    finally:
        if gc_was_enabled:
            gc.enable()
    return bad
