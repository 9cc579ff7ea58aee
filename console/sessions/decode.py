"""Session lines to events, and to `--json`'s lines, at the speed a day-long session needs.

`json.loads` plus a strptime per event was most of the cost of a replay (about 64 k events per
CPU-second). `--json` writes lines framed as the recorder writes them through unchanged; the
human printer (console/sessions/human.py) decodes a segment in one call and asks `checked_lines`
and `all_ts_ok` here whether every record is one `decode_record` takes. Anything that does
not fit (a bad line, a line nested too deep, a numeric `ts`) goes down the slow path one line
at a time and is reported as a bad line, never raised.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Union

import msgspec

from console.errors import BadLine
from console.sessions.source import LONG_LINE, MAX_LINE, split_events
from remote.errors import RecordError
from remote.spine import intake
from remote.spine.event_types import SCHEMAS
from remote.spine.events import JOB_LINES, Event, expand_record

_ANY = msgspec.json.Decoder()
_TS_LEN = 24


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
    return canonical_ts(text) or _parses(text)


@lru_cache(maxsize=1024)
def _date_ok(date: str) -> bool:
    return _parses(date + "T00:00:00.000Z")


def _parses(text: str) -> bool:
    try:
        parse_ts_fast(text)
    except BadLine:
        return False
    return True


def canonical_ts(text: str) -> bool:
    """The recorder's shape with a valid date: then `text[11:19]` is the time of day the
    per-event printer's strftime would write."""
    return _CANONICAL_TS.fullmatch(text) is not None and _date_ok(text[:10])


_ZERO_DIGITS = bytes.maketrans(b"123456789", b"0" * 9)
_TS_SHAPE = b"0000-00-00T00:00:00.000Z"
_LATE_HOUR = re.compile(rb"T2[4-9]")


def all_ts_ok(recs: Sequence[Any]) -> bool:
    """`canonical_ts` of every record's ts in a few C calls (a regex per record was a fifth of
    a replay): joined by `|`, their digits made zeros, they read the recorder's shape once a
    record, hours, minutes and seconds in range by their columns, each date checked once.
    False only sends each record to `canonical_ts` on its own."""
    tss = [rec.ts for rec in recs]
    n = len(tss)
    joined = "|".join(tss)
    if not n or not joined.isascii():
        return False
    raw = joined.encode("ascii")
    if (raw.translate(_ZERO_DIGITS) != b"|".join([_TS_SHAPE] * n)
            or raw[11::25].translate(None, b"012") or raw[14::25].translate(None, b"012345")
            or raw[17::25].translate(None, b"012345") or _LATE_HOUR.search(raw) is not None):
        return False
    date = tss[0][:10]
    if raw.count(date.encode("ascii")) == n:
        return _date_ok(date)
    return all(map(_date_ok, {ts[:10] for ts in tss}))


def decode_event(line: bytes) -> Event:
    """One line to an Event; every way a line can be wrong is a BadLine (RecursionError from a
    line nested 200,000 deep included)."""
    if line.startswith(LONG_LINE):
        raise BadLine(f"a line longer than {MAX_LINE >> 20} MiB (not read, not held)")
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
    event = Event(kind=kind, host=host, payload=payload, ts=parse_ts_fast(ts))
    if kind != JOB_LINES:  # a log block is judged where it is expanded (expand_record)
        why = intake.problem(kind, payload)
        if why is not None:
            raise BadLine(why)
    return event


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
    finding markers at open needs (a decode_event per candidate was half a cold open), and
    one more for the payloads of the kinds that have a schema, judged as decode_event judges
    them (a stage.start whose stage is a number is no marker)."""
    joined = b"[" + b",".join(lines) + b"]"
    try:
        events = _EVENTS.decode(joined) if valid_utf8(joined) else None
    except (msgspec.DecodeError, RecursionError):
        events = None
    if events is None or len(events) != len(lines):
        return [_kind_or_none(line) for line in lines]
    kinds = [e.kind if _ts_ok(e.ts) and _object_or_falsy(e.payload) else None for e in events]
    judged = [i for i, kind in enumerate(kinds) if kind in SCHEMAS]
    if judged and checked_lines(b"\n".join([lines[i] for i in judged]) + b"\n",
                                len(judged)) is None:
        for i in judged:  # one of them is not valid: each is judged alone
            kinds[i] = _kind_or_none(lines[i])
    return kinds


def _kind_or_none(line: bytes) -> str | None:
    try:
        return decode_event(line).kind
    except BadLine:
        return None


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


_LINE_START = b'{"ts":"'
# a newline that does not end a record `}` and start the next `{"ts":"`: one regex search (a
# literal first, so a memchr per newline), where counting the 9-byte separator took twice as long
_UNFRAMED = re.compile(rb'\n(?:(?<!\}\n)|(?!\{"ts":"))')


def _checked_record(kind: str) -> type:
    """A session line of `kind` as a struct whose payload is the kind's schema: decoding into
    it IS the schema's judgement (remote/spine/intake.py does the same by msgspec.convert)."""
    return msgspec.defstruct(f"Checked_{kind.replace('.', '_')}",
                             [("ts", str), ("host", str, ""), ("payload", SCHEMAS[kind] | None, None)],
                             tag_field="kind", tag=kind, gc=False)


_CHECKED = {kind: _checked_record(kind) for kind in SCHEMAS}
CHECKED_KIND = {record: kind for kind, record in _CHECKED.items()}  # a checked record's kind
# every kind with a schema, told apart by `kind`: one C call checks a whole segment
_CHECKED_LINES = msgspec.json.Decoder(Union[tuple(_CHECKED.values())])  # type: ignore[arg-type]  # noqa: UP007


def framed_as_recorded(data: bytes) -> bool:
    """Lines each `{"ts":"...}`, none blank: then every newline ends one top-level value
    (inside one, `}` is never followed by `{`), so `decode_lines` finding as many values as the
    segment has lines means one a line, in order (it would also take `{..} {..}` on one line:
    one too many)."""
    return (data.startswith(_LINE_START) and data.endswith(b"}\n")
            and _UNFRAMED.search(data, 0, len(data) - 1) is None)


def checked_lines(data: bytes, n: int) -> list[Any] | None:
    """Every one of `n` lines framed as recorded a record that `decode_record` takes (its
    payload its kind's schema, a log block's columns whole), judged in one C call, keeping
    what it decoded: each record with its payload as its kind's schema (`.ts`, `.host`,
    `.payload`; a log block's texts and run_id are the ones its job.line events get), or
    None when one is not valid (also for a kind without a schema: each record is then asked
    alone)."""
    try:
        recs = _CHECKED_LINES.decode_lines(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    return recs if len(recs) == n and all(map(_whole, recs)) else None


def valid_json_block(data: bytes, first: int, count: int, bad: list[tuple[int, str]]
                     ) -> bytes:
    """A segment's bytes (whole lines) as `--json` prints them: the valid records, passed
    through unchanged, judged exactly as the per-event reader judges them. A block framed as
    the recorder writes it (every line `{"ts":"...}`, no blank line, valid UTF-8) is decoded
    in one call into records whose payloads are their kinds' schemas, which is the judgement
    itself; then only the timestamps and each log block's lengths are left to check. A block
    that fails (a damaged record, a kind without a schema, a payload of `[]`) goes line by
    line through `decode_record`, and the bad lines are reported, not printed."""
    if framed_as_recorded(data) and valid_utf8(data):
        recs = checked_lines(data, count)
        if recs is not None and all_ts_ok(recs):
            return data
    good: list[bytes] = []
    for i, line in enumerate(split_events(data)):
        try:  # the per-event reader's judgement, a log block's expansion included
            decode_record(line)
        except BadLine as exc:
            bad.append((first + i, str(exc)))
        else:
            good.append(line)
    return b"\n".join(good) + b"\n" if good else b""


_BLOCK_RECORD = _CHECKED[JOB_LINES]
# the kinds whose schema takes an empty payload (a missing or null one is `{}`)
_EMPTY_OK = frozenset(_CHECKED[k] for k in SCHEMAS if intake.problem(k, {}) is None)


def _whole(rec: Any) -> bool:
    """What the schema leaves to decode_record: a log block expands (texts as many as
    offsets, at least one), a missing payload is one its kind takes empty."""
    p = rec.payload
    if p is None:
        return type(rec) in _EMPTY_OK
    if type(rec) is _BLOCK_RECORD:
        return bool(p.texts) and len(p.texts) == len(p.offsets)
    return True


def valid_utf8(data: bytes) -> bool:
    """Valid UTF-8, which is what the printed lines must be: ASCII at once, else decoded
    (a real run's log holds a `×` or an accent in most segments; C speed either way). The
    typed decoders skip the fields they do not read without looking at their bytes, so this
    is what finds a bad byte there (about 35 ns a record of a real run)."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True

