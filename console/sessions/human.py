"""`console replay --print`'s lines for a segment of a session, with the printer's own rules.

The per-event printer (`printer.human_line` on an Event from `decode_record`) costs about 8 us
a record: a dict decode per line, a datetime parse, a strftime. Here a segment framed as
recorded is judged in one msgspec call (the schema table's tagged union, decode.py
`checked_lines`), which also gives each log line and log block typed, and decoded in one more
that leaves unread what no rule reads (a log line's or block's payload, a sample's beyond its
gate, printer.GATES) and makes the rest of the payloads plain dicts; the timestamps are checked
in one pass. Each record's text is then made by the same rule `human_line` uses (printer.RULES),
its time sliced from the fixed-width timestamp; a log block's lines share one head
(printer.job_head) and are joined. A segment that does not pass (not framed as recorded, not
UTF-8, a record its schema refuses or of a kind without one, an odd timestamp) is decoded into
dicts and each record judged on its own; what does not fit even that (a payload that is not
an object, a line that is not a record) goes through `decode_record` and `human_line`, which
report the bad ones. Every line is made `visible`: one check for the segment, since nearly
always nothing is there to draw.
"""
from __future__ import annotations

import re
from typing import Any, Union

import msgspec

from console.printer import (
    GATES,
    RULES,
    STAGE_RECORD_PREFIX,
    _default,
    host_part,
    human_line,
    job_head,
    job_line_text,
)
from console.sessions.decode import (
    CHECKED_KIND,
    BadLine,
    all_ts_ok,
    canonical_ts,
    checked_lines,
    decode_record,
    framed_as_recorded,
    valid_utf8,
)
from console.sessions.source import split_events
from remote.spine import intake
from remote.spine.event_types import SCHEMAS
from remote.spine.events import JOB_LINE, JOB_LINES
from remote.spine.sanitize import visible


class _Record(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    ts: str
    kind: str
    host: str = ""
    payload: Any = None


_RECORD = msgspec.json.Decoder(_Record)  # its decode_lines: one a line


def _shown_record(kind: str) -> type:
    """A valid session line of `kind` as the printer reads it, its payload decoded no further
    than its rule looks: a log block's not at all (its lines are printed from the checked
    record), a gated kind's to its gate (printer.GATES), any other's to a dict."""
    payload: Any = Any
    if kind in (JOB_LINES, JOB_LINE):
        payload = msgspec.Raw
    elif kind in GATES:
        gate = msgspec.defstruct(f"Gate_{kind.replace('.', '_')}", [(GATES[kind], Any, False)],
                                 gc=False)
        payload = gate | None
    return msgspec.defstruct(f"Shown_{kind.replace('.', '_')}",
                             [("ts", str), ("host", str, ""), ("payload", payload, None)],
                             tag_field="kind", tag=kind, gc=False)


class _Payload(msgspec.Struct, gc=False):
    payload: Any = None


_PAYLOAD = msgspec.json.Decoder(_Payload)  # a gated record's whole payload, when it is shown
_SHOWN_LINES = msgspec.json.Decoder(Union[tuple(map(_shown_record, SCHEMAS))])  # type: ignore[arg-type]  # noqa: UP007


def human_bytes(data: bytes, first: int, count: int, bad: list[tuple[int, str]]) -> bytes:
    """The printed lines of a segment (`count` non-blank lines) as UTF-8 (an unpaired
    surrogate as `?`), each ending in a newline; its bad records appended to `bad`."""
    out: list[str] = []  # the lines, each ending in a newline, and each log block as 3 pieces
    blocks: dict[int, tuple[str, list[str]]] = {}  # out[k]: where a block's head and texts are
    framed = framed_as_recorded(data)
    if not (framed and _skipping(data, count, first, bad, out, blocks)):
        _any_segment(data, framed, count, first, bad, out)
    if not out:
        return b""
    try:
        raw = "".join(out).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape
        raw = b""
    # every newline one that ends a line, and nothing `visible` would change: one check for
    # the segment (a deleting translate, and a search only when a lead byte of what it
    # changes is there), else each line drawn
    lines = len(out) - 3 * len(blocks) + sum(len(texts) for _, texts in blocks.values())
    if raw.count(b"\n") == lines and (
            len(raw.translate(None, _LEADS)) == len(raw) or _CHANGED.search(raw) is None):
        return raw
    shown: list[str] = []
    k = 0
    while k < len(out):
        if k in blocks:
            start, texts = blocks[k]
            shown += [visible(start + text) for text in texts]
            k += 3
        else:
            shown.append(visible(out[k][:-1]))
            k += 1
    return ("\n".join(shown) + "\n").encode("utf-8", "replace")


# What `visible` changes, as UTF-8: C0 controls but tab and newline, and DEL (found by one
# deleting translate, with the lead bytes of the rest), C1 controls (U+0080-009F: C2 80-9F),
# U+061C (D8 9C) and the format characters U+200E/F, U+2028-202E (E2 80 ..), U+2066-2069
# (E2 81 ..); tests/console/sessions/test_printer_paths.py checks this against `visible`.
_LEADS = bytes([*range(0x09), *range(0x0B, 0x20), 0x7F]) + b"\xc2\xd8\xe2"
_CHANGED = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xd8\x9c"
                      rb"|\xe2\x80[\x8e\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]")


def _skipping(data: bytes, count: int, first: int, bad: list[tuple[int, str]], out: list[str],
              blocks: dict[int, tuple[str, list[str]]]) -> bool:
    """A segment framed as recorded, valid UTF-8, every record valid (its schema decoded once,
    decode.checked_lines, which is the judgement) with canonical times: printed from that
    decode (log lines and blocks) and one more that reads only what the other rules read (a
    GPU sample, never printed, is not made into dicts). False, with nothing done, otherwise."""
    if not valid_utf8(data):
        return False
    recs = checked_lines(data, count)
    if recs is None or not all_ts_ok(recs):
        return False
    try:
        shown = _SHOWN_LINES.decode_lines(data)
    except (msgspec.DecodeError, RecursionError):
        return False
    if len(shown) != count:
        return False
    kind_of, gates, hosts = CHECKED_KIND, GATES, _HostParts()
    lines: list[bytes] = []
    for i, rec in enumerate(recs):
        kind = kind_of[type(rec)]
        p = shown[i].payload
        if kind == JOB_LINES:  # the checked record's: the texts its job.line events get
            block = rec.payload
            _block(rec.ts[11:19] + hosts[rec.host] + job_head(block.run_id), block.texts,
                   out, blocks)
            continue
        if kind == JOB_LINE:  # the printer's job line rule, from the checked record
            text = job_line_text(rec.payload.run_id, rec.payload.text)
            if text is not None:
                out.append(f"{rec.ts[11:19]}{hosts[rec.host]}{text}\n")
            continue
        if kind in gates:  # only its gate read
            if p is None or not getattr(p, gates[kind]):
                continue  # the rule shows no line: its payload need not be read
            lines = lines or split_events(data)
            p = _PAYLOAD.decode(lines[i]).payload  # a record already decoded once: it decodes
        if type(p) is not dict:  # no payload: the per-event reader's to make one
            lines = lines or split_events(data)
            _per_event(lines[i], first + i, bad, out)
            continue
        if not _by_rule(kind, p, rec, hosts, out):
            lines = lines or split_events(data)
            _per_event(lines[i], first + i, bad, out)  # reported as the per-event printer does
    return True


def _block(start: str, texts: list[str], out: list[str],
           blocks: dict[int, tuple[str, list[str]]]) -> None:
    """A log block's lines, its stage records left out, each under their shared head `start`:
    three pieces of `out` (the head, the lines joined, the last newline), copied once."""
    sep = "\n" + start
    body = sep.join(texts)
    if STAGE_RECORD_PREFIX in body:
        texts = [t for t in texts if not t.startswith(STAGE_RECORD_PREFIX)]
        body = sep.join(texts)
    if texts:
        blocks[len(out)] = (start, texts)
        out += (start, body, "\n")


def _any_segment(data: bytes, framed: bool, count: int, first: int, bad: list[tuple[int, str]],
                 out: list[str]) -> None:
    """A segment `_skipping` did not take (a damaged or edited file, a kind without a schema):
    decoded whole into dicts and each record judged on its own. A segment not framed as the
    recorder frames every one it writes (a blank line, a line that does not start with its ts)
    goes line by line through the per-event reader."""
    try:  # every byte decoded (no unknown field skipped), so one not UTF-8 fails it here
        recs = _RECORD.decode_lines(data) if framed else []
    except (msgspec.DecodeError, RecursionError):
        recs = []
    if len(recs) != count or not count:
        for i, line in enumerate(split_events(data)):
            _per_event(line, first + i, bad, out)
    else:
        _records(recs, data, all_ts_ok(recs), first, bad, out)


def _records(recs: list[_Record], lines: list[bytes] | bytes, ts_ok: bool, first: int,
             bad: list[tuple[int, str]], out: list[str]) -> None:
    """Each record by its rule once judged as the per-event reader judges it (a log block
    goes to that reader); `lines` the segment's bytes, split into lines if needed."""
    hosts = _HostParts()
    i = -1
    for rec in recs:
        i += 1
        p = rec.payload
        if type(p) is not dict or not ((ts_ok or canonical_ts(rec.ts)) and _valid(rec.kind, p)):
            lines = split_events(lines) if isinstance(lines, bytes) else lines
            _per_event(lines[i], first + i, bad, out)  # judged and printed as one event
            continue
        if not _by_rule(rec.kind, p, rec, hosts, out):
            lines = split_events(lines) if isinstance(lines, bytes) else lines
            _per_event(lines[i], first + i, bad, out)  # reported as the per-event printer does


def _by_rule(kind: str, p: dict[str, Any], rec: Any, hosts: _HostParts,
             out: list[str]) -> bool:
    """The record's line by its kind's rule (printer.RULES; none where the rule shows none)
    under its time and host, appended to `out`; False where the rule raised, for the caller to
    judge and report the record as the per-event printer does."""
    try:
        text = RULES.get(kind, _default)(kind, p)
    except (TypeError, ValueError, AttributeError, KeyError):
        return False
    if text is not None:
        out.append(f"{rec.ts[11:19]}{hosts[rec.host]}{text}\n")
    return True


class _HostParts(dict[str, str]):
    """printer.host_part of each host a segment names, made the first time it is met."""

    def __missing__(self, host: str) -> str:
        part = self[host] = host_part(host)
        return part


def _valid(kind: str, p: dict[str, Any]) -> bool:
    """One record's payload as the per-event reader judges it (a log block is left to it)."""
    return kind != JOB_LINES and intake.problem(kind, p) is None


def _per_event(line: bytes, index: int, bad: list[tuple[int, str]], out: list[str]) -> None:
    try:
        shown = [human_line(e) for e in decode_record(line)]
    except (BadLine, TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
        bad.append((index, str(exc)))
        return
    out.extend(text + "\n" for text in shown if text is not None)
