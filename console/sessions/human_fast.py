"""`console replay --print`'s bytes for a segment framed as the recorder writes it: the fast
path of a real run's session (one that holds job.lines records).

A real pipeline run records about half job.line (nearly all of them the stage records the
pipeline prints for the console, never shown), a third stage.progress, a tenth console.info
and a few stage, job and connection events (benchmarks/data/demo-run.jsonl). The goal is a
million records per CPU-second, 1 us a record on this machine, and the parts that cannot go
are a third of that: msgspec's decode of the typed records (~0.4 us, the floor of validating
the JSON being ~0.2), one count of the separator that proves the framing (~0.13) and the
timestamp check (~0.08). So the Python loop over the records does as little as it can:
- a record's line is not formatted where it is met: the loop appends its template (one per
  kind and shape, constant strings) and its fields, and one `%` of the joined templates over
  all the fields makes the segment's text in C (an f-string per stage.progress line, with
  its two float formats, was ~1.2 us; a float formatted by `%` costs a third of a call);
- a stage record (a job.line whose text starts `@@eagle3 `) is dropped on its first check;
- the text is encoded once and checked once for what `visible` would change, and for a
  newline inside a field (a line drawn as two), on its bytes.
A segment whose joined text fails that check is made again line by line (`_drawn`). A
segment not framed as the recorder writes it answers None, and the caller's general path
(console/sessions/human_records.py `_human_records`) makes the same text more slowly. Same
text as the per-event printer (printer.human_line + visible) in every case:
tests/console/sessions/test_replay_print_fast.py compares them on every kind and shape.
"""

from __future__ import annotations

from typing import Any

import msgspec

from console.sessions import human_kinds as kinds
from console.sessions.decode import (
    SCHEMAS,
    STAGE_RECORD_PREFIX,
    UNSET,
)
from console.sessions.human_records import (
    _CHANGED,
    _LEADS,
    _all_ts_ok,
    _block_lines,
    slow_record,
)
from console.sessions.proof import TYPED_KINDS, Strict, Typed, block_ok, line_matches, typed_ok
from console.sessions.source import split_events
from remote.spine.sanitize import visible


class _Payload(Typed, gc=False):
    """The payload fields the printer reads, in the order the recorder writes them (msgspec
    tries the next field first); the rest are skipped without building objects."""

    run_id: Any = UNSET
    name: Strict.Name = UNSET
    text: Any = None
    offset: Strict.Offset = UNSET
    stage: Strict.OptStr = UNSET
    done: Any = UNSET
    total: Any = UNSET
    unit: Any = UNSET
    rate: Any = UNSET
    summary: Strict.Summary = UNSET
    message: Any = UNSET
    label: Any = UNSET
    print_: Any = msgspec.field(name="print", default=False)
    texts: list[str] | None = None
    offsets: list[int] | None = None


class _Record(msgspec.Struct, gc=False, kw_only=True):
    ts: str
    host: str = ""
    kind: str
    payload: _Payload = msgspec.field(default_factory=_Payload)


_RECORDS = msgspec.json.Decoder(_Record)
_LINE_START = b'{"ts":"'
_SEP = b'}\n{"ts":"'
_LEVEL = {"console.info": "", "console.warning": "warning: ", "console.error": "error: "}

# The templates: `%s` of a str is the str, of an int or float what an f-string's `{x}` makes;
# `%5.1f` and `%.3g` format a float as format() does with the same spec.
_JOB = "%s [%s] %s| %s\n", "%s %s| %s\n"
_PROGRESS = "%s [%s] %s: %s/%s %s %5.1f%% %.3g %s/s\n", "%s %s: %s/%s %s %5.1f%% %.3g %s/s\n"
_PROGRESS_ANY = "%s [%s] %s: %s/%s %s%s%s\n", "%s %s: %s/%s %s%s%s\n"
_LEVELED = "%s [%s] %s%s\n", "%s %s%s\n"
_SUMMARY = "%s [%s] %s: %s\n", "%s %s: %s\n"
_MADE = "%s\n"


def fast_records(data: bytes, first: int, count: int, bad: list[tuple[int, str]]
                 ) -> bytes | None:
    """The segment's printed lines as UTF-8, each ending in a newline, or None for a segment
    this path does not take (see the module docstring), `bad` then as it was. `count` is
    the segment's number of non-blank lines (the index's): with `count - 1` separators
    `}\\n{"ts":"` there is no blank line and every newline ends a top-level value (inside
    one, `}` is never followed by `{`), so decode_lines finding `count` values means one per
    line (it would take `{..} {..}` on one line)."""
    if not (data.startswith(_LINE_START) and data.endswith(b"}\n")
            and data.count(_SEP) == count - 1):
        return None
    try:
        recs = _RECORDS.decode_lines(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    if len(recs) != count or not _all_ts_ok(recs):
        return None
    return joined(*templates(recs, data, first, bad))


Pieces = tuple[list[str], list[Any], int, list[int]]


def templates(recs: list[_Record], data: bytes, first: int, bad: list[tuple[int, str]]
              ) -> Pieces:
    """Each shown record's template and fields, in order; the newlines inside made lines;
    the pieces already made `visible`. The per-record loop: the part of the path that is
    Python's (benchmarks/replay_print_parts.py times it alone)."""
    fmt: list[str] = []
    args: list[Any] = []
    template, fields = fmt.append, args.extend
    inner = 0  # newlines inside made lines (a block's, or a record that is several events)
    kept: list[int] = []  # the pieces already made `visible` (a block's lines, slow records)
    lines: list[bytes] | None = None
    stage_prefix, own_rule, level_of, human, slow = (STAGE_RECORD_PREFIX, kinds.OWN_RULE,
                                                     _LEVEL.get, kinds.human, kinds.SLOW)
    schemas, typed_kinds = SCHEMAS, TYPED_KINDS
    job, job_bare = _JOB
    progress, progress_bare = _PROGRESS
    leveled, leveled_bare = _LEVELED
    summarized, summarized_bare = _SUMMARY
    i = -1
    for rec in recs:
        i += 1
        kind = rec.kind
        p = rec.payload
        if kind == "job.line":
            text = p.text
            run_id = p.run_id
            if type(text) is str and (run_id is UNSET or type(run_id) is str):  # job_line_ok
                if text.startswith(stage_prefix):
                    continue  # a pipeline stage record: shown as its stage.* event
                host = rec.host
                if host:
                    template(job)
                    fields((rec.ts[11:19], host, run_id[:20] if run_id else "", text))
                else:
                    template(job_bare)
                    fields((rec.ts[11:19], run_id[:20] if run_id else "", text))
                continue
        elif kind == "stage.progress":
            stage, done, total, unit, rate = p.stage, p.done, p.total, p.unit, p.rate
            if unit is UNSET:
                unit = ""
            td, tt, tr = type(done), type(total), type(rate)
            if (type(stage) is str and type(unit) is str and (td is int or td is float)
                    and (tt is int or tt is float)):
                if tr is float and total and rate and -1000 < rate < 1000:
                    host = rec.host
                    if host:
                        template(progress)
                        fields((rec.ts[11:19], host, stage, done, total, unit,
                                100 * done / total, rate, unit))
                    else:
                        template(progress_bare)
                        fields((rec.ts[11:19], stage, done, total, unit, 100 * done / total,
                                rate, unit))
                    continue
                if tr is float or tr is int or rate is UNSET or rate is None:
                    _progress_any(rec, stage, done, total, unit, rate, template, fields)
                    continue
        elif kind == "job.lines":
            texts, run_id = p.texts, p.run_id
            if texts is not None and block_ok(p):
                made: list[str] = []
                _block_lines(rec.ts, rec.host, run_id, texts, made, False)
                if made:
                    shown = "\n".join(made)
                    inner += shown.count("\n")
                    kept.append(len(fmt))
                    template(_MADE)
                    fields((shown,))
                continue
        elif kind in schemas and not (kind in typed_kinds and typed_ok(kind, p)) \
                and not line_matches(kind, (lines := lines or split_events(data))[i]):
            pass  # not proven valid by its schema: decode_record judges it (slow_record)
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
                    if host:
                        template(leveled)
                        fields((rec.ts[11:19], host, level, message))
                    else:
                        template(leveled_bare)
                        fields((rec.ts[11:19], level, message))
                    continue
            else:
                summary = p.summary
                if type(summary) is str and summary and kind not in own_rule:
                    host = rec.host
                    if host:
                        template(summarized)
                        fields((rec.ts[11:19], host, kind, summary))
                    else:
                        template(summarized_bare)
                        fields((rec.ts[11:19], kind, summary))
                    continue
                text = human(rec.ts, rec.host, kind, p)
                if text is not slow:
                    if text is not None:
                        template(_MADE)
                        fields((text,))
                    continue
        # a record none of the above formats: the per-event printer's own lines
        if lines is None:
            lines = split_events(data)
        shown_lines = slow_record(lines[i], first + i, bad)
        if shown_lines:
            inner += len(shown_lines) - 1
            kept.append(len(fmt))
            template(_MADE)
            fields(("\n".join(shown_lines),))
    return fmt, args, inner, kept


def joined(fmt: list[str], args: list[Any], inner: int, kept: list[int]) -> bytes:
    """The segment's text made by one `%` of the joined templates over all the fields, as
    UTF-8, checked once."""
    if not fmt:
        return b""
    text = "".join(fmt) % tuple(args)
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape
        return _drawn(fmt, args, kept)
    # every newline one that ends a line (a field holding one is drawn as `␊`), and nothing
    # `visible` changes (a deleting translate, about 1 ns a byte, and a search only when a
    # lead byte of what it changes is there): nearly always, so checked once for the segment
    if raw.count(b"\n") == len(fmt) + inner and (
            len(raw.translate(None, _LEADS)) == len(raw) or _CHANGED.search(raw) is None):
        return raw
    return _drawn(fmt, args, kept)


# how many fields each template takes
_ARITY = {t: t.count("%") - 2 * t.count("%%") for t in (
    *_JOB, *_PROGRESS, *_PROGRESS_ANY, *_LEVELED, *_SUMMARY, _MADE)}


def _drawn(fmt: list[str], args: list[Any], kept: list[int]) -> bytes:
    """The segment's lines one by one, each made `visible` as the per-event printer does,
    but the ones already made so (`kept`: a block's, the per-event printer's own): for a
    segment where the check on its joined text failed."""
    out: list[str] = []
    at = 0
    keep = set(kept)
    for k, template in enumerate(fmt):
        n = _ARITY[template]
        line = template % tuple(args[at:at + n])
        at += n
        out.append(line if k in keep else visible(line[:-1]) + "\n")
    return "".join(out).encode("utf-8", "replace")


def _progress_any(rec: _Record, stage: str, done: float, total: float, unit: str, rate: Any,
                  template: Any, fields: Any) -> None:
    """A stage.progress line in any other shape a number allows (no total, no rate, an int
    rate, a rate of 1000 or more): printer._fmt_num's cases, spelled out."""
    if not rate:
        extra = ""
    elif type(rate) is int or -1000 < rate < 1000:
        extra = f" {rate:.3g} {unit}/s" if type(rate) is float else f" {rate} {unit}/s"
    else:
        extra = f" {rate:,.0f} {unit}/s"
    frac = f" {100 * done / total:5.1f}%" if total else ""
    host = rec.host
    if host:
        template(_PROGRESS_ANY[0])
        fields((rec.ts[11:19], host, stage, done, total, unit, frac, extra))
    else:
        template(_PROGRESS_ANY[1])
        fields((rec.ts[11:19], stage, done, total, unit, frac, extra))
