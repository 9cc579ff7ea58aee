"""The human printer's lines for a segment's bytes: where a segment goes, and the cut path for
log lines written one job.line per line (older sessions, and synthetic days).

`human_text` is what `console replay --print` calls per segment. A segment holding job.lines
records (what the recorder writes now: a real run's segments nearly all hold one) goes to
console/sessions/human_records.py; any other valid UTF-8 block with no blank line goes
through `_human_runs`, where log batches in the recorder's exact shape are cut a group of
lines at a time and anything else is decoded (`_human`, `_slow_line`). Same text as the
per-event printer (printer.human_line + visible) in every case.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import partial
from itertools import compress, count, islice, repeat
from operator import itemgetter, not_

import msgspec

from console.sessions import human_kinds as kinds
from console.sessions.decode import (
    _LINES,
    SCHEMAS,
    STAGE_RECORD_PREFIX,
    UNSET,
    _join,
    _Line,
    _one_line,
    _ts_ok,
    valid_utf8,
)
from console.sessions.human_fast import fast_records
from console.sessions.human_records import _BLOCK_KIND, _ZERO_DIGITS, _human_records
from console.sessions.human_records import printable as _printable
from console.sessions.human_records import slow_record as _slow_record
from console.sessions.proof import TYPED_KINDS, line_matches, typed_ok
from console.sessions.source import split_events
from remote.spine.sanitize import visible


def human_text(data: bytes, first: int, count: int, bad: list[tuple[int, str]]) -> str:
    """The human printer's lines for a segment's bytes, joined by newlines (no final one) and
    sanitised as the Printer does (remote text is drawn, never obeyed by the terminal). A
    block of valid UTF-8 with no blank line, which is what the recorder writes, goes through
    `_human_runs`, where log batches in the recorder's exact shape are cut a group of lines at
    a time and anything else is decoded. Each pass over a block costs ~1 ns a byte here (0.2
    us an event), so the checks that can be made once per group are made once. A segment
    holding job.lines records goes to human_records.py (see the module docstring); one that
    is not valid UTF-8 (a damaged file) record by record as the per-event printer reads it."""
    if _BLOCK_KIND in data:
        if not valid_utf8(data):
            return "\n".join(_per_event(data, first, bad))
        fast = fast_records(data, first, count, bad)
        if fast is not None:
            return fast.decode("utf-8")[:-1]
        return "\n".join(_human_records(data, first, bad))
    return _human_blocks(data, first, count, bad)


def human_bytes(data: bytes, first: int, count: int, bad: list[tuple[int, str]]) -> bytes:
    """`human_text`'s lines as `replay --print` writes them: UTF-8 (an unpaired surrogate as
    `?`), each ending in a newline. The record fast path makes these bytes itself, so a real
    run's segment is encoded once and never decoded back."""
    if _BLOCK_KIND in data:
        if not valid_utf8(data):
            text = "\n".join(_per_event(data, first, bad))
        else:
            fast = fast_records(data, first, count, bad)
            if fast is not None:
                return fast
            text = "\n".join(_human_records(data, first, bad))
    else:
        text = _human_blocks(data, first, count, bad)
    return (text + "\n").encode("utf-8", "replace") if text else b""


def _per_event(data: bytes, first: int, bad: list[tuple[int, str]]) -> list[str]:
    """Each record through the event decoder and printer.human_line: for a segment holding a
    byte that is not UTF-8, which the typed decoders can skip unseen in a field they do not
    read (a job line's `name`) where the per-event printer reports the line as bad."""
    out: list[str] = []
    for i, line in enumerate(split_events(data)):
        out.extend(_slow_record(line, first + i, bad))
    return out


def _human_blocks(data: bytes, first: int, count: int, bad: list[tuple[int, str]]) -> str:
    """A segment without job.lines records (line-per-event logs): see `human_text`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "\n".join(_per_event(data, first, bad))
    lines = text.split("\n")
    lines.pop()
    if not text or len(lines) != count or "" in lines:
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
            if type(text) is str and (run_id is UNSET or type(run_id) is str):
                if text.startswith(STAGE_RECORD_PREFIX):
                    return None
                host = rec.host
                return visible(f"{rec.ts[11:19]} [{host}] {(run_id or '')[:20]}| {text}" if host
                               else f"{rec.ts[11:19]} {(run_id or '')[:20]}| {text}")
        elif rec.kind in SCHEMAS and not (rec.kind in TYPED_KINDS
                                          and typed_ok(rec.kind, rec.payload)) \
                and not line_matches(rec.kind, line.encode("utf-8")):
            pass  # not proven valid by its schema: decode_record judges it
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
    tests/console/sessions/test_replay_fast.py compares them). Used for blocks with blank lines:
    rare, so simplicity over speed (one that is not valid UTF-8 goes to `_per_event`)."""
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
                if type(text) is str and (run_id is UNSET or type(run_id) is str):
                    if not text.startswith(STAGE_RECORD_PREFIX):
                        host = rec.host
                        append(visible(
                            f"{rec.ts[11:19]} [{host}] {(run_id or '')[:20]}| {text}" if host
                            else f"{rec.ts[11:19]} {(run_id or '')[:20]}| {text}"))
                    continue
            elif (kind == "stats.sample" and not rec.payload.print_
                  and line_matches(kind, lines[i])):
                continue
        out.extend(_slow_record(lines[i], first + i, bad))
    return out
