"""Session lines to events, and to printed lines, at the speed a day-long session needs.

`json.loads` plus a strptime per event was most of the cost of a replay (about 64 k events per
CPU-second). msgspec decodes a whole segment of lines in one call, straight into small typed
records; the printer formats those without building an Event at all, and `--json` writes the
validated lines through unchanged. Anything that does not fit the fast shapes (a bad line, a
line nested too deep, a numeric `ts`) goes down the slow path one line at a time and is reported
as a bad line, never raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import msgspec

from remote.events import Event

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


def decode_events(lines: Sequence[bytes], first: int, bad: list[tuple[int, str]]) -> list[Event]:
    out: list[Event] = []
    append = out.append
    for i, line in enumerate(lines):
        try:
            append(decode_event(line))
        except BadLine as exc:
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
    is checked line by line and its bad lines reported, not printed."""
    if (data.startswith(_LINE_START) and data.endswith(b"}\n") and data.count(b"\n") == count
            and data.count(b"}\n" + _LINE_START) == count - 1 and data.isascii()):
        return data
    from console.session_source import split_events

    good = valid_json_lines(split_events(data), first, bad)
    return b"\n".join(good) + b"\n" if good else b""


def human_block(data: bytes, first: int, count: int, bad: list[tuple[int, str]]) -> list[str]:
    """The human printer's lines for a segment's bytes: decoded in one call straight from the
    block (no split, no join) when it has no blank line, which is what the recorder writes."""
    if data.count(b"\n") == count and data[:1] != b"\n":
        return _human(None, data, first, bad)
    from console.session_source import split_events

    return _human(split_events(data), None, first, bad)


def _human(lines: Sequence[bytes] | None, data: bytes | None, first: int,
           bad: list[tuple[int, str]]) -> list[str]:
    """Job lines and quiet stats samples formatted from typed records decoded in one call,
    every other kind through printer.human_line on a real Event (the same text either way;
    tests/test_replay_fast.py compares them)."""
    from console.printer import human_line
    from console.session_source import split_events

    try:
        blob = _join(lines) if lines is not None else \
            b"[" + data[:-1].replace(b"\n", b",") + b"]"  # type: ignore[index]
        recs: Sequence[_Line | None] = _LINES.decode(blob)
    except (msgspec.DecodeError, RecursionError):
        lines = lines if lines is not None else split_events(data)  # type: ignore[arg-type]
        recs = [_one_line(line) for line in lines]
    out: list[str] = []
    append = out.append
    i = -1
    for rec in recs:
        i += 1
        if rec is not None and len(rec.ts) == _TS_LEN:
            kind = rec.kind
            if kind == "job.line":
                p = rec.payload
                text, run_id = p.text, p.run_id
                if type(text) is str and (run_id is None or type(run_id) is str):
                    if not text.startswith(STAGE_RECORD_PREFIX):
                        host = rec.host
                        append(f"{rec.ts[11:19]} [{host}] {(run_id or '')[:20]}| {text}" if host
                               else f"{rec.ts[11:19]} {(run_id or '')[:20]}| {text}")
                    continue
            elif kind == "stats.sample" and not rec.payload.print_:
                continue
        if lines is None:
            lines = split_events(data)  # type: ignore[arg-type]
        try:
            line = human_line(decode_event(lines[i]))
        except (BadLine, TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
            bad.append((first + i, str(exc)))
            continue
        if line is not None:
            append(line)
    return out


def _one_line(line: bytes) -> _Line | None:
    try:
        return _ONE_LINE.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None
