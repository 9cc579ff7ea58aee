"""Session lines to events, and to printed lines, at the speed a day-long session needs.

`json.loads` plus a strptime per event was most of the cost of a replay (about 64 k events per
CPU-second). `--json` writes lines framed as the recorder writes them through unchanged; the
human printer cuts log lines in the recorder's exact shape straight from their text and sends
every other line through msgspec into small typed records (decoding was about a microsecond an
event here). Anything that does not fit the fast shapes (a bad line, a line nested too deep, a
numeric `ts`) goes down the slow path one line at a time and is reported as a bad line, never
raised.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import lru_cache, partial
from itertools import compress, count, islice, repeat
from operator import attrgetter, itemgetter, not_
from typing import Any

import msgspec

from console.printer import human_line
from console.sessions import human_kinds as kinds
from remote.spine.events import JOB_LINES, Event, RecordError, expand_record
from remote.spine.sanitize import visible

STAGE_RECORD_PREFIX = "@@eagle3 "


class _Head(msgspec.Struct):
    """What --json needs to trust a line: a JSON object with a string ts and kind."""

    ts: str
    kind: str


class _Payload(msgspec.Struct, gc=False):
    """The payload fields the human printer's hot kinds use; everything else is skipped by the
    decoder without building Python objects (gc=False: a million records must not wake the
    cyclic collector, which was half the cost)."""

    text: Any = None
    run_id: Any = None
    print_: Any = msgspec.field(name="print", default=False)
    # what console/sessions/human_kinds.py formats the common other kinds from (UNSET: absent)
    stage: Any = msgspec.UNSET
    done: Any = msgspec.UNSET
    total: Any = msgspec.UNSET
    unit: Any = msgspec.UNSET
    rate: Any = msgspec.UNSET
    summary: Any = msgspec.UNSET
    message: Any = msgspec.UNSET
    label: Any = msgspec.UNSET


class _Line(msgspec.Struct, gc=False):
    ts: str
    kind: str
    payload: _Payload = msgspec.field(default_factory=_Payload)
    host: str = ""


_HEADS = msgspec.json.Decoder(list[_Head])
_LINES = msgspec.json.Decoder(list[_Line])
_ONE_HEAD = msgspec.json.Decoder(_Head)
_ONE_LINE = msgspec.json.Decoder(_Line)
_ANY = msgspec.json.Decoder()
_TS_LEN = 24


class BadLine(ValueError):
    pass


@lru_cache(maxsize=4096)
def parse_ts_fast(text: str) -> datetime:
    """The session's fixed-width UTC timestamp; cached because a log burst shares one."""
    if len(text) != _TS_LEN or text[-1] != "Z" or text[10] != "T":
        raise BadLine(f"bad timestamp {text[:40]!r}")
    try:
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    except ValueError:
        raise BadLine(f"bad timestamp {text[:40]!r}") from None


# The recorder's timestamp with a time of day that is always valid: only its date can be
# wrong (a 31st of a short month), and there are few dates, so the date is what is cached.
_CANONICAL_TS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
                           r"\.[0-9]{3}Z")


def _ts_ok(text: str) -> bool:
    """A timestamp the per-event decoder accepts: a job line or quiet sample with any other
    is a corrupt line for every printer, not only for the typed one. The usual shape is
    checked by one regex and its date looked up (every sample has its own second and every
    marker too: a parse each was a tenth of a replay's time); anything else is parsed."""
    if _CANONICAL_TS.fullmatch(text) is not None:
        return _date_ok(text[:10])
    return _parses(text)


@lru_cache(maxsize=1024)
def _date_ok(date: str) -> bool:
    return _parses(date + "T00:00:00.000Z")


def _parses(text: str) -> bool:
    try:
        parse_ts_fast(text)
    except BadLine:
        return False
    return True


def decode_event(line: bytes) -> Event:
    """One line to an Event; every way a line can be wrong is a BadLine (RecursionError from a
    line nested 200,000 deep included)."""
    try:
        data = _ANY.decode(line)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise BadLine(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(data, dict):
        raise BadLine("not an event: a JSON object was expected")
    kind, ts, host = data.get("kind"), data.get("ts"), data.get("host", "")
    payload = data.get("payload") or {}
    if not isinstance(kind, str) or not isinstance(ts, str):
        raise BadLine("not an event: 'kind' and 'ts' must be strings")
    if not isinstance(payload, dict) or not isinstance(host, str):
        raise BadLine("not an event: payload must be an object and host a string")
    return Event(kind=kind, host=host, payload=payload, ts=parse_ts_fast(ts))


class _Event(msgspec.Struct, gc=False):
    """A line as `decode_event` reads it, its payload left undecoded (checked by
    `_object_or_falsy`): a batch decodes into these when every line is a JSON object with
    string ts, kind and host."""

    ts: str
    kind: str
    host: str = ""
    payload: msgspec.Raw = msgspec.Raw(b"null")


_EVENTS = msgspec.json.Decoder(list[_Event])
_FALSY_JSON = frozenset((b"null", b"false", b"0", b"0.0", b"-0", b'""', b"[]"))


def _object_or_falsy(raw: msgspec.Raw) -> bool:
    """What decode_event takes as a payload (`data.get("payload") or {}` must be a dict): an
    object, or a value Python finds false; the uncommon falsy spellings are decoded."""
    b = bytes(raw)
    if b[:1] == b"{" or b in _FALSY_JSON:
        return True
    try:
        return not _ANY.decode(b)
    except (msgspec.DecodeError, RecursionError):
        return False


def event_kinds(lines: Sequence[bytes]) -> list[str | None]:
    """The kind of each line's event, None for a line that is not one (a BadLine for
    decode_event): one decode call for all of them when all are events, which is what
    finding markers at open needs (a decode_event per candidate was half a cold open)."""
    try:
        events = _EVENTS.decode(_join(lines))
    except (msgspec.DecodeError, RecursionError):
        events = None
    if events is not None and len(events) == len(lines):
        return [e.kind if _ts_ok(e.ts) and _object_or_falsy(e.payload) else None
                for e in events]
    kinds: list[str | None] = []
    for line in lines:
        try:
            kinds.append(decode_event(line).kind)
        except BadLine:
            kinds.append(None)
    return kinds


def decode_record(line: bytes) -> Sequence[Event]:
    """One line to the events it records: a job.lines record's job.line events, in order,
    any other line's one event; a record that cannot be expanded is a BadLine."""
    event = decode_event(line)
    if event.kind != JOB_LINES:
        return (event,)
    try:
        return expand_record(event)
    except RecordError as exc:
        raise BadLine(str(exc)) from None


def decode_events(lines: Sequence[bytes], first: int, bad: list[tuple[int, str]]) -> list[Event]:
    """The events of records `first`, `first + 1`, ...: a bad record is reported by its
    record index and skipped whole."""
    out: list[Event] = []
    append = out.append
    for i, line in enumerate(lines):
        try:
            event = decode_event(line)
            if event.kind == JOB_LINES:
                out.extend(expand_record(event))
            else:
                append(event)
        except (BadLine, RecordError) as exc:
            bad.append((first + i, str(exc)))
    return out


def _join(lines: Sequence[bytes]) -> bytes:
    return b"[" + b",".join(lines) + b"]"


def valid_json_lines(lines: Sequence[bytes], first: int, bad: list[tuple[int, str]]
                     ) -> list[bytes]:
    """The lines that are events, unchanged: one decode call for the whole segment when all
    are (the common case), line by line only when one is not."""
    try:
        heads = _HEADS.decode(_join(lines))
    except (msgspec.DecodeError, RecursionError):
        pass
    else:
        if all(len(h.ts) == _TS_LEN for h in heads):
            return list(lines)
    good: list[bytes] = []
    for i, line in enumerate(lines):
        try:
            decode_event(line)
        except BadLine as exc:
            bad.append((first + i, str(exc)))
        else:
            good.append(line)
    return good


_LINE_START = b'{"ts":"'


def valid_json_block(data: bytes, first: int, count: int, bad: list[tuple[int, str]]
                     ) -> bytes:
    """A segment's bytes (whole lines) as `--json` prints them. Lines are passed through
    without decoding when the block is framed as the recorder writes it (ASCII, no blank line,
    every line `{"ts":"...}`), checked by byte counts over the whole block; a block that is not
    is checked line by line and its bad lines reported, not printed. (Only ASCII was passed
    before: a real run's segments nearly all hold a non-ASCII character somewhere, and each
    went line by line, 0.57 M events per CPU-second instead of several.)"""
    if (data.startswith(_LINE_START) and data.endswith(b"}\n") and data.count(b"\n") == count
            and data.count(b"}\n" + _LINE_START) == count - 1 and _utf8(data)):
        return data
    from console.sessions.source import split_events

    good = valid_json_lines(split_events(data), first, bad)
    return b"\n".join(good) + b"\n" if good else b""


def _utf8(data: bytes) -> bool:
    """Valid UTF-8, which is what the printed lines must be: ASCII at once, else decoded
    (a real run's log holds a `×` or an accent in most segments; C speed either way)."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def human_text(data: bytes, first: int, count: int, bad: list[tuple[int, str]]) -> str:
    """The human printer's lines for a segment's bytes, joined by newlines (no final one) and
    sanitised as the Printer does (remote text is drawn, never obeyed by the terminal). A
    block of valid UTF-8 with no blank line, which is what the recorder writes, goes through
    `_human_runs`, where log batches in the recorder's exact shape are cut a group of lines at
    a time and anything else is decoded. Each pass over a block costs ~1 ns a byte here (0.2
    us an event), so the checks that can be made once per group are made once."""
    if _BLOCK_KIND in data:
        return "\n".join(_human_records(data, first, bad))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    lines = text.split("\n")
    lines.pop()
    if not text or len(lines) != count or "" in lines:
        from console.sessions.source import split_events

        return "\n".join(_human(split_events(data), None, first, bad))
    # UTF-8 decodes to as many characters as bytes only when every byte is ASCII: the
    # lengths say so without another pass over the block.
    return "\n".join(_human_runs(lines, first, bad, len(text) == len(data)))


# A job line as JobLines writes it, from the `","host"` after the timestamp to the opening
# quote of its text: a block of log lines shares it, so it is matched once and then compared.
_JOB_MID = re.compile(r'","host":"([^"\\]*)","kind":"job\.line","payload":\{"run_id":"([^"\\]*)"'
                      r',"name":"[^"\\]*","text":"')
_OFFSET_KEY = '","offset":'
_TAIL = re.compile(r'","offset":(?:0|[1-9][0-9]*)\}\}')


def _job_prefix(line: str) -> tuple[str, str] | None:
    """The part a block of job lines shares (up to the text's opening quote) and the head
    printed for it, when `line` starts like a job line written by JobLines."""
    m = _JOB_MID.match(line, 31) if line.find('"', 7) == 31 else None
    if m is None or not line.startswith('{"ts":"') or not line[: m.end()].isprintable():
        return None
    host, run_id = m.group(1), m.group(2)[:20]
    return line[: m.end()], (f"{line[18:26]} [{host}] {run_id}| " if host
                             else f"{line[18:26]} {run_id}| ")


# Why runs and groups, not lines: a job line as JobLines writes it is `P + text + KEY + digits
# + "}}"`, where P (everything up to the text's opening quote, its timestamp included) is
# shared by every line of one log batch, and the offset's digits change length rarely. Each
# per-line C call costs 0.1-0.3 us on this machine, the whole budget for an event, so a batch
# is cut with as few of them as possible: its end is found from the last batch's length or
# by a binary search, and proven by min/max (every line starts with P exactly when all sort
# between P and P with its last character bumped); a group of lines whose offsets have the
# same number of digits (found from its last line or by a binary search) is sliced by two
# maps, the texts and the fixed-width tails, and proven on the joined results: no quote (so
# each text ended where it was cut), backslash or stage record in the texts, every character
# printable, and the tails, their digits made zeros, KEY + zeros + "}}" once a line (with no
# leading zero in the first digits column). A group that fails a check is printed line by
# line with every check (`_human_lines`); a line that is not a job line goes through the
# typed decoder.


def _human_runs(lines: list[str], first: int, bad: list[tuple[int, str]], ascii_only: bool
                ) -> list[str]:
    out: list[str] = []
    n = len(lines)
    i = 0
    hint = 0  # the last run's length: batches of a log tend to be alike
    # The last batch's prefix after its timestamp and its head after the time: the next
    # batch of the same log differs only in the timestamp, and a line holding the same
    # characters there would be matched by _JOB_MID to exactly them (its classes stop at
    # quotes), so the match is skipped (about a fifth of a 50-line batch's fixed cost).
    mid: str | None = None
    rest = ""
    while i < n:
        line = lines[i]
        if (mid is not None and line.startswith(mid, 31) and line.startswith('{"ts":"')
                and line.find('"', 7) == 31 and line[:31].isprintable()):
            found: tuple[str, str] | None = (line[:31] + mid, line[18:26] + rest)
        else:
            found = _job_prefix(line)
            if found is not None:
                mid, rest = found[0][31:], found[1][8:]
        if found is None or "\\" in found[0] or not _ts_ok(line[7:31]):
            text = _slow_line(line, first + i, bad)
            if text is not None:
                out.append(text)
            i += 1
            continue
        prefix, head = found
        end = _run_end(lines, i, prefix, hint)
        _cut_run(lines, i, end, prefix, head, first, bad, out, ascii_only)
        hint = end - i
        i = end
    return out


# C0 controls but the newline, and DEL: in ASCII text, what str.isprintable refuses.
_CONTROLS = bytes([*range(0x0A), *range(0x0B, 0x20), 0x7F])


def _printable(texts: str, ascii_only: bool) -> bool:
    """Every character of `texts` printable, newlines apart. For ASCII a deleting translate
    of the bytes (about 1 ns a byte) instead of str.isprintable (about 4 here)."""
    if ascii_only:
        raw = texts.encode("ascii")
        return len(raw.translate(None, _CONTROLS)) == len(raw)
    return texts.replace("\n", "").isprintable()


def _last_true(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The first index after `lo` where `ok` fails, assuming it holds on a prefix of
    [lo, hi): exponential then binary search, O(log) calls (the caller proves the range)."""
    step = 1
    good = lo  # ok(lo) holds
    while good + step < hi and ok(good + step):
        good += step
        step *= 2
    bad_at = min(good + step, hi)
    while bad_at - good > 1:
        mid = (good + bad_at) // 2
        if ok(mid):
            good = mid
        else:
            bad_at = mid
    return bad_at


# A tail `","offset":` + N digits + `}}` with every ASCII digit made a 0: the tails of a
# group, so translated, are this repeated once per line exactly when each holds KEY, N ASCII
# digits and `}}` in their places (one translate and one compare per group, where a strided
# slice per column was ~15 calls; a non-ASCII character encodes to bytes >= 0x80, which no
# shape holds). Bytes, because str.translate pays ~2 us a call to build its cache.
_TAIL_SHAPES = [(_OFFSET_KEY + "0" * n + "}}").encode() for n in range(24)]
_ZERO_DIGITS = bytes.maketrans(b"123456789", b"0" * 9)


def _key_at(lines: list[str], at: int, k: int) -> bool:
    return lines[k].startswith(_OFFSET_KEY, at)


def _run_end(lines: list[str], i: int, prefix: str, hint: int) -> int:
    n = len(lines)
    end = i + hint
    if not (hint > 1 and end <= n and lines[end - 1].startswith(prefix)
            and (end == n or not lines[end].startswith(prefix))):
        end = _last_true(i, n, lambda k: lines[k].startswith(prefix))
    run = lines[i:end]
    if min(run) >= prefix and max(run) < prefix[:-1] + chr(ord(prefix[-1]) + 1):
        return end
    # P again after a foreign line (two batches in one millisecond): line by line
    rest = islice(lines, i + 1, None)
    return next(compress(count(i + 1), map(not_, map(str.startswith, rest, repeat(prefix)))),
                len(lines))


def _cut_run(lines: list[str], i: int, end: int, prefix: str, head: str, first: int,
             bad: list[tuple[int, str]], out: list[str], ascii_only: bool) -> None:
    cut = len(prefix)
    sep = "\n" + head
    while i < end:
        line = lines[i]
        at = line.rfind(_OFFSET_KEY)
        digits = len(line) - at - 13
        if at < cut or not 0 < digits < len(_TAIL_SHAPES):
            out.extend(_human_lines([line], first + i, bad))
            i += 1
            continue
        back = -(2 + digits)
        # Offsets grow within a batch: when the last line's has as many digits, all have
        # (and the checks below prove it either way).
        stop = end if lines[end - 1].startswith(_OFFSET_KEY, back - 11) else \
            _last_true(i, end, partial(_key_at, lines, back - 11))
        group = lines[i:stop]
        m = stop - i
        texts = head + sep.join(map(itemgetter(slice(cut, back - 11)), group))
        # every line's last 13 + digits characters (KEY, offset, "}}") side by side; column
        # k of the tails is tails[k::width] (the first digits: no leading zero)
        tails = "".join(map(itemgetter(slice(back - 11, None)), group))
        width = 13 + digits
        if ('"' not in texts and "\\" not in texts and STAGE_RECORD_PREFIX not in texts
                and _printable(texts, ascii_only)
                and tails.encode("utf-8", "replace").translate(_ZERO_DIGITS)
                == _TAIL_SHAPES[digits] * m
                and (digits == 1 or "0" not in tails[11::width])
                # an empty text, or a line one shorter whose text quote is KEY's: the second
                # is no JSON, and only its length tells them apart
                and ((head + sep not in texts and not texts.endswith(head))
                     or min(map(len, group)) >= cut + width)):
            out.append(texts)
        else:
            out.extend(_human_lines(group, first + i, bad))
        i = stop


def _human_lines(lines: list[str], first: int, bad: list[tuple[int, str]]) -> list[str]:
    """The cut with every check made on each line: for a group of `_cut_run` that failed one
    (an escape, a stage record, a control character or a quote in a text, a torn tail)."""
    out: list[str] = []
    append = out.append
    prefix = "\0"
    cut = 0
    head = ""
    tail = _TAIL.fullmatch
    i = -1
    for line in lines:
        i += 1
        if not line.startswith(prefix):
            found = _job_prefix(line)
            if found is None or not _ts_ok(line[7:31]):
                text = _slow_line(line, first + i, bad)
                if text is not None:
                    append(text)
                continue
            prefix, head = found
            cut = len(prefix)
        j = line.find('"', cut)
        if (j > 0 and tail(line, j) is not None and "\\" not in line and line.isprintable()
                and not line.startswith(STAGE_RECORD_PREFIX, cut)):
            append(head + line[cut:j])
        else:
            text = _slow_line(line, first + i, bad)
            if text is not None:
                append(text)
    return out


def _slow_line(line: str, index: int, bad: list[tuple[int, str]]) -> str | None:
    """One line through the typed decoder and printer.human_line, as before the fast path."""
    rec = _one_line(line)
    if rec is not None and _ts_ok(rec.ts):
        if rec.kind == "job.line":
            p = rec.payload
            text, run_id = p.text, p.run_id
            if type(text) is str and (run_id is None or type(run_id) is str):
                if text.startswith(STAGE_RECORD_PREFIX):
                    return None
                host = rec.host
                return visible(f"{rec.ts[11:19]} [{host}] {(run_id or '')[:20]}| {text}" if host
                               else f"{rec.ts[11:19]} {(run_id or '')[:20]}| {text}")
        elif rec.kind == "stats.sample" and not rec.payload.print_:
            return None
        else:
            text = kinds.human(rec.ts, rec.host, rec.kind, rec.payload)
            if text is not kinds.SLOW:
                return None if text is None else visible(text)

    shown = _slow_record(line.encode("utf-8"), index, bad)
    return "\n".join(shown) if shown else None


def _human(lines: Sequence[bytes] | None, data: bytes | None, first: int,
           bad: list[tuple[int, str]]) -> list[str]:
    """Job lines and quiet stats samples formatted from typed records decoded in one call,
    every other kind through printer.human_line on a real Event (the same text either way;
    tests/console/sessions/test_replay_fast.py compares them). Used for blocks that are not valid UTF-8 or
    have blank lines: rare, so simplicity over speed."""
    from console.sessions.source import split_events

    try:
        blob = _join(lines) if lines is not None else \
            b"[" + data[:-1].replace(b"\n", b",") + b"]"  # type: ignore[index]
        recs: Sequence[_Line | None] = _LINES.decode(blob)
    except (msgspec.DecodeError, RecursionError):
        lines = lines if lines is not None else split_events(data)  # type: ignore[arg-type]
        recs = [_one_line(line) for line in lines]
    if lines is None:
        lines = split_events(data)  # type: ignore[arg-type]
    if len(recs) != len(lines):  # a line holding two objects (`{..},{..}`): one at a time
        recs = [_one_line(line) for line in lines]
    out: list[str] = []
    append = out.append
    i = -1
    for rec in recs:
        i += 1
        if rec is not None and _ts_ok(rec.ts):
            kind = rec.kind
            if kind == "job.line":
                p = rec.payload
                text, run_id = p.text, p.run_id
                if type(text) is str and (run_id is None or type(run_id) is str):
                    if not text.startswith(STAGE_RECORD_PREFIX):
                        host = rec.host
                        append(visible(
                            f"{rec.ts[11:19]} [{host}] {(run_id or '')[:20]}| {text}" if host
                            else f"{rec.ts[11:19]} {(run_id or '')[:20]}| {text}"))
                    continue
            elif kind == "stats.sample" and not rec.payload.print_:
                continue
        out.extend(_slow_record(lines[i], first + i, bad))
    return out


# -- job.lines records: a log block as one record (remote/event_types.JobLinesRecord) ---------

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
    printer (tests/console/sessions/test_replay_fast.py compares them); every other kind as in `_human`."""
    from console.sessions.source import split_events

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
                if type(text) is str and (run_id is None or type(run_id) is str):
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
        out.extend(_slow_record(lines[i], first + i, bad))
    _make_visible(out, raw)
    return out


_TS_OF = attrgetter("ts")
_TS_SHAPE = b"0000-00-00T00:00:00.000Z"
_HOURS = frozenset(f"{h:02d}" for h in range(24))
_MONTHS_DAYS = itemgetter(slice(0, 10))
_HOUR = itemgetter(slice(11, 13))


def _all_ts_ok(recs: Sequence[_Line]) -> bool:
    """`_ts_ok` of every record's ts, in a few C calls: the recorder's shape (digits where
    digits go, checked on all of them joined), minutes and seconds under 60 (their tens
    columns), and each distinct hour and date checked once. False sends each record to
    `_ts_ok` on its own, so a False here is never wrong, only slower."""
    tss = list(map(_TS_OF, recs))
    n = len(tss)
    if set(map(len, tss)) != {_TS_LEN}:
        return False
    try:
        joined = "".join(tss).encode("ascii")
    except UnicodeEncodeError:
        return False
    if len(joined) != _TS_LEN * n or joined.translate(_ZERO_DIGITS) != _TS_SHAPE * n:
        return False
    if joined[14::_TS_LEN].translate(None, b"012345") or \
            joined[17::_TS_LEN].translate(None, b"012345"):
        return False
    return (set(map(_HOUR, tss)) <= _HOURS
            and all(map(_date_ok, set(map(_MONTHS_DAYS, tss)))))


def _make_visible(out: list[str], raw: list[int]) -> None:
    """`visible` on the lines at `raw` (made from typed records, not yet sanitised): one
    check for them all, since nearly always every character is printable already."""
    if raw and not _printable("".join([out[k] for k in raw]), False):
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
            and _printable(joined, joined.isascii())):
        out.append(joined)
        return
    out.extend(visible(head + text) for text in texts
               if not text.startswith(STAGE_RECORD_PREFIX))


def _slow_record(line: bytes, index: int, bad: list[tuple[int, str]]) -> list[str]:
    """One record through the event decoder and printer.human_line: a job.lines record is
    expanded into its job.line events first; a record that is not an event, or a block that
    cannot be expanded, is a bad line."""
    try:
        lines = [human_line(e) for e in decode_record(line)]
    except (BadLine, TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
        bad.append((index, str(exc)))
        return []
    return [visible(text) for text in lines if text is not None]


def _one_block_line(line: bytes) -> _BlockLine | None:
    try:
        return _ONE_BLOCK_LINE.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None


def _one_line(line: bytes | str) -> _Line | None:
    try:
        return _ONE_LINE.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None
