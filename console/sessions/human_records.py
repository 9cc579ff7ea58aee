"""The human printer's lines for a segment that holds job.lines records (a real run's).

A real pipeline run records about half job.line (nearly all of them the stage records the
pipeline prints for the console, never shown), a third stage.progress, a tenth console.info
and a few stage, job and connection events, with its log in job.lines blocks, so nearly every
segment of it holds a block and comes here (benchmarks/real_session.py). The budget for a
million events per CPU-second is 1 us a record, and msgspec's decode of the records alone
takes about half of it here, so the rest is spent once per segment where it can be:
- console/sessions/human_fast.py `fast_records`: a segment framed as the recorder writes it
  (every line `{"ts":"...}`, no blank line), formatted by templates and one `%` (it uses
  this module's checks: `_all_ts_ok`, `_block_lines`, what `visible` changes). Anything
  else comes here, to `_human_records`, the general path.
- `_human_records`: the same text for any segment, a record that does not fit taken through
  `printer.human_line` on a real Event (`slow_record`).
Same text as the per-event printer in every case (tests/console/sessions/test_replay_real.py,
tests/console/sessions/test_replay_fast.py and tests/console/sessions/test_replay_print_fast.py compare them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import Protocol

import msgspec

from console.errors import BadLine
from console.printer import human_line
from console.sessions import human_kinds as kinds
from console.sessions.decode import (
    SCHEMAS,
    STAGE_RECORD_PREFIX,
    UNSET,
    _date_ok,
    _Line,
    _Payload,
    _ts_ok,
    decode_record,
)
from console.sessions.proof import TYPED_KINDS, line_matches, typed_ok
from console.sessions.source import split_events
from remote.spine.sanitize import visible

# C0 controls but the newline, and DEL: in ASCII text, what str.isprintable refuses.
_CONTROLS = bytes([*range(0x0A), *range(0x0B, 0x20), 0x7F])
_ZERO_DIGITS = bytes.maketrans(b"123456789", b"0" * 9)


def printable(texts: str, ascii_only: bool) -> bool:
    """Every character of `texts` printable, newlines apart (so `visible` changes nothing).
    For ASCII a deleting translate of the bytes (about 1 ns a byte) instead of
    str.isprintable (about 4 here)."""
    if ascii_only:
        raw = texts.encode("ascii")
        return len(raw.translate(None, _CONTROLS)) == len(raw)
    return texts.replace("\n", "").isprintable()


def slow_record(line: bytes, index: int, bad: list[tuple[int, str]]) -> list[str]:
    """One record through the event decoder and printer.human_line: a job.lines record is
    expanded into its job.line events first; a record that is not an event, or a block that
    cannot be expanded, is a bad line."""
    try:
        lines = [human_line(e) for e in decode_record(line)]
    except (BadLine, TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
        bad.append((index, str(exc)))
        return []
    return [visible(text) for text in lines if text is not None]


_BLOCK_KIND = b'"kind":"job.lines"'


class _BlockPayload(_Payload, gc=False):
    """What the printer reads of a record: a job.line's fields plus a job.lines record's
    (texts and offsets typed, so a malformed block fails the decode and is checked on its
    own)."""

    texts: list[str] | None = None
    offsets: list[int] | None = None


class _BlockLine(_Line, gc=False):
    """A session line whose payload may be a log block."""

    payload: _BlockPayload = msgspec.field(default_factory=_BlockPayload)


_BLOCK_LINES = msgspec.json.Decoder(list[_BlockLine])
_ONE_BLOCK_LINE = msgspec.json.Decoder(_BlockLine)


def _human_records(data: bytes, first: int, bad: list[tuple[int, str]]) -> list[str]:
    """A segment holding job.lines records: one msgspec decode of all its records, then a
    block's lines formatted by one join (its head, shared by every line, made once). The
    per-line cost is the decoded text itself, the whole point of the record format: cutting
    per-line records from their bytes still cost ~1 us a line. Same text as the per-event
    printer (tests/console/sessions/test_replay_fast.py compares them); every other kind as in
    human_log.py's `_human`."""
    lines: list[bytes] | None = None
    try:  # every line a record, no blank one: the segment is a JSON array once "\n" is ","
        recs: Sequence[_BlockLine | None] = _BLOCK_LINES.decode(
            b"[" + data[:-1].replace(b"\n", b",") + b"]")
    except (msgspec.DecodeError, RecursionError):
        recs = []
    if len(recs) != data.count(b"\n"):  # a bad line, a blank one, or two objects on one
        lines = split_events(data)
        recs = [_one_block_line(line) for line in lines]
    # JSON strings hold control characters, quotes and backslashes only as escapes (and DEL
    # raw): a segment of ASCII with no backslash and no DEL holds printable text only, in
    # every record, so its blocks need no per-block check (each was a pass over the text).
    clean = (data.isascii() and b"\\" not in data and b"\x7f" not in data
             and _STAGE_BYTES not in data)
    out: list[str] = []
    append = out.append
    raw: list[int] = []  # lines made here from typed fields, sanitised at the end
    human, progress, slow = kinds.human, kinds.progress, kinds.SLOW
    # every timestamp checked at once (a check per record was a fifth of the loop)
    ts_ok = bool(recs) and None not in recs and _all_ts_ok(recs)  # type: ignore[arg-type]
    i = -1
    for rec in recs:
        i += 1
        if rec is not None and (ts_ok or _ts_ok(rec.ts)):
            kind = rec.kind
            p = rec.payload
            if kind == "job.line":  # the most common kind in a real run (stage records)
                text, run_id = p.text, p.run_id
                if type(text) is str and (run_id is UNSET or type(run_id) is str):
                    if not text.startswith(STAGE_RECORD_PREFIX):
                        host = rec.host
                        raw.append(len(out))
                        append(f"{rec.ts[11:19]} [{host}] {(run_id or '')[:20]}| {text}" if host
                               else f"{rec.ts[11:19]} {(run_id or '')[:20]}| {text}")
                    continue
            elif kind == "job.lines":
                texts, run_id = p.texts, p.run_id
                if (texts and p.offsets is not None and len(texts) == len(p.offsets)
                        and type(run_id) is str):
                    _block_lines(rec.ts, rec.host, run_id, texts, out, clean)
                    continue
            elif kind == "stage.progress":
                text = progress(rec.ts, rec.host, p)
                if text is not slow:
                    raw.append(len(out))
                    append(text)
                    continue
            elif kind in SCHEMAS and not (kind in TYPED_KINDS and typed_ok(kind, p)) \
                    and not line_matches(
                        kind, (lines := lines if lines is not None else split_events(data))[i]):
                pass  # not proven valid by its schema: decode_record judges it (slow_record)
            elif kind == "stats.sample" and not p.print_:
                continue
            else:
                text = human(rec.ts, rec.host, kind, p)
                if text is not slow:
                    if text is not None:
                        raw.append(len(out))
                        append(text)
                    continue
        if lines is None:
            lines = split_events(data)
        out.extend(slow_record(lines[i], first + i, bad))
    _make_visible(out, raw)
    return out


def _make_visible(out: list[str], raw: list[int]) -> None:
    """`visible` on the lines at `raw` (made from typed records, not yet sanitised): one
    check for them all, since nearly always every character is printable already. Joined
    with nothing between them, so a newline found is one inside a line (a field holding one),
    which `visible` draws as `␊`."""
    if not raw:
        return
    joined = "".join([out[k] for k in raw])
    if "\n" in joined or not printable(joined, False):
        for k in raw:
            out[k] = visible(out[k])


_STAGE_BYTES = STAGE_RECORD_PREFIX.encode()


def _block_lines(ts: str, host: str, run_id: str, texts: list[str], out: list[str],
                 clean: bool) -> None:
    head = f"{ts[11:19]} [{host}] {run_id[:20]}| " if host else f"{ts[11:19]} {run_id[:20]}| "
    sep = "\n" + head
    joined = head + sep.join(texts)
    if clean:
        out.append(joined)
        return
    # One check for the whole block: no newline but the separators' (a text holding one is
    # drawn, as the per-event printer does), every character printable (so `visible` would
    # change nothing), and no stage record (not printed: shown as its stage.* event).
    if (joined.count("\n") == len(texts) - 1 and STAGE_RECORD_PREFIX not in joined
            and printable(joined, joined.isascii())):
        out.append(joined)
        return
    out.extend(visible(head + text) for text in texts
               if not text.startswith(STAGE_RECORD_PREFIX))


# What `visible` changes, as UTF-8: C0 controls but the newline, and DEL (deleted by one
# translate, with the lead bytes below), C1 controls (U+0080-009F: C2 80-9F), U+061C (D8 9C)
# and the format characters U+200E/F, U+2028-202E (E2 80 ..) and U+2066-2069 (E2 81 ..).
_LEADS = _CONTROLS + b"\xc2\xd8\xe2"
_CHANGED = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xd8\x9c"
                      rb"|\xe2\x80[\x8e\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]")


_TS_SHAPES: dict[int, bytes] = {}
_TS_OF = attrgetter("ts")
_TS_SHAPE = b"0000-00-00T00:00:00.000Z"
_MONTHS_DAYS = itemgetter(slice(0, 10))
_LATE_HOUR = re.compile(rb"T2[4-9]")


class _Stamped(Protocol):
    @property
    def ts(self) -> str: ...


def _all_ts_ok(recs: Sequence[_Stamped]) -> bool:
    """`_ts_ok` of every record's ts in a few C calls (a check per record was a fifth of the
    loop): joined by `|`, their digits made zeros, they read the recorder's shape once a
    record (a `|` inside one would make one too many), hours, minutes and seconds in range by
    their columns, and the dates checked once each (one `count` when all share the first's:
    a date can only match at a timestamp's start). False sends each record to `_ts_ok` on
    its own, so a False here is never wrong, only slower."""
    tss = list(map(_TS_OF, recs))
    n = len(tss)
    joined = "|".join(tss)
    if not n or not joined.isascii():
        return False
    raw = joined.encode("ascii")
    shape = _TS_SHAPES.get(n)
    if shape is None:
        shape = _TS_SHAPES[n] = b"|".join([_TS_SHAPE] * n)
    if (raw.translate(_ZERO_DIGITS) != shape or raw[11::25].translate(None, b"012")
            or raw[14::25].translate(None, b"012345") or raw[17::25].translate(None, b"012345")
            or _LATE_HOUR.search(raw) is not None):
        return False
    date = tss[0][:10]
    if raw.count(date.encode("ascii")) == n:
        return _date_ok(date)
    return all(map(_date_ok, set(map(_MONTHS_DAYS, tss))))


def _one_block_line(line: bytes) -> _BlockLine | None:
    try:
        return _ONE_BLOCK_LINE.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None
