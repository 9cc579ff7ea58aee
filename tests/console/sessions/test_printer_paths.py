"""`replay --print`'s segment printer (console/sessions/human.py) against the per-event printer
(decode_record + printer.human_line + visible) on every kind of the schema table, with hostile
field values: control characters and ANSI escapes, bidi and C1 characters, huge numbers, wrong
types, missing fields, bytes that are not UTF-8, very long strings, odd timestamps, payloads
that are not objects. Same bytes out, same records reported bad, in every case."""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec.inspect as mi
import pytest

from console.printer import human_line
from console.sessions import human
from console.sessions.decode import BadLine, decode_record
from remote.spine.event_types import SCHEMAS
from remote.spine.sanitize import visible

TS = "2026-12-03T04:05:06.789Z"
STRS = ["plain", "esc \x1b[2J\x1b]0;title\x07", "c1 \x9b31m", "bidi \u202eabc \u2066",
        "multi\nline\rcr", "nul \x00 del \x7f tab\t", "@@eagle3 {\"stage\":\"x\"}", "x" * 5000,
        "caf\u00e9 \u00d7 \U0001f680", "zw \u200b \u2028", "", "quote \" back \\"]
NUMS: list[Any] = [0, -1, 10**30, 2**64, 1e308, -0.0, 1.5, 999.5, 1234.5678, 3]
WRONG: list[Any] = [None, 7, "s", [1, "a"], {"a": {"b": None}}, True, 10**40]


def _value(t: Any, rng: random.Random) -> Any:
    """A value of msgspec type `t`, hostile where the type allows."""
    if isinstance(t, mi.StrType):
        return rng.choice(STRS)
    if isinstance(t, (mi.IntType, mi.FloatType)):
        return rng.choice([n for n in NUMS if isinstance(t, mi.FloatType) or type(n) is int])
    if isinstance(t, mi.BoolType):
        return rng.choice([True, False])
    if isinstance(t, mi.UnionType):
        return _value(rng.choice([x for x in t.types if not isinstance(x, mi.NoneType)]
                                 or t.types), rng)
    if isinstance(t, mi.ListType):
        return [_value(t.item_type, rng) for _ in range(rng.randrange(1, 4))]
    if isinstance(t, mi.DictType):
        return {rng.choice(STRS): _value(t.value_type, rng)}
    if isinstance(t, mi.StructType):
        return {f.encode_name: _value(f.type, rng) for f in t.fields if f.required}
    if isinstance(t, mi.NoneType):
        return None
    return {"nested": [rng.choice(STRS), rng.choice(NUMS)], "k\x1b": None}  # Any


def _payloads(kind: str, rng: random.Random) -> tuple[list[dict[str, Any]], list[Any]]:
    """Valid payloads of `kind` (every field set, then each optional one alone), and damaged
    ones (each field of a wrong type, each required field missing, not an object)."""
    fields = mi.type_info(SCHEMAS[kind]).fields  # type: ignore[union-attr]
    full = {f.encode_name: _value(f.type, rng) for f in fields}
    required = {f.encode_name: _value(f.type, rng) for f in fields if f.required}
    valid = [full, required, {**required, "extra": rng.choice(STRS), "print": True}]
    valid += [{**required, f.encode_name: _value(f.type, rng)} for f in fields]
    if kind == "job.lines":  # as many texts as offsets: what the schema leaves to expansion
        for p in valid:
            p["texts"] = [rng.choice(STRS) for _ in range(3)]
            p["offsets"] = [1, 2, 10**12]
    damaged: list[Any] = [{**full, f.encode_name: rng.choice(WRONG)} for f in fields]
    damaged += [{k: v for k, v in full.items() if k != f.encode_name}
                for f in fields if f.required]
    damaged += [[], 0, "text", [1], None, False]
    return valid, damaged


def _line(kind: str, payload: Any, *, host: str = "box", ts: str = TS, ascii_: bool = False
          ) -> bytes:
    return json.dumps({"ts": ts, "host": host, "kind": kind, "payload": payload},
                      separators=(",", ":"), ensure_ascii=ascii_).encode("utf-8", "surrogatepass")


def _per_event(lines: list[bytes], first: int) -> tuple[bytes, list[int]]:
    """The reference: each line decoded as an event and printed by human_line + visible."""
    out: list[str] = []
    bad: list[int] = []
    for i, raw in enumerate(lines):
        try:
            shown = [human_line(e) for e in decode_record(raw)]
        except (BadLine, TypeError, ValueError, AttributeError, KeyError):
            bad.append(first + i)
            continue
        out.extend(visible(text) for text in shown if text is not None)
    return "".join(line + "\n" for line in out).encode("utf-8", "replace"), bad


def _same(lines: list[bytes], first: int = 0, *, blank: bool = False) -> int:
    data = (b"\n\n" if blank else b"\n").join(lines) + b"\n"
    bad: list[tuple[int, str]] = []
    got = human.human_bytes(data, first, len(lines), bad)
    want, want_bad = _per_event(lines, first)
    assert got == want
    assert [i for i, _ in bad] == want_bad
    return len(want_bad)


def _hostile_lines(rng: random.Random) -> tuple[list[bytes], list[bytes]]:
    valid: list[bytes] = []
    damaged: list[bytes] = []
    for kind in SCHEMAS:
        good, bad = _payloads(kind, rng)
        for n, p in enumerate(good):
            valid.append(_line(kind, p, host=["box", "", "b\x1bx"][n % 3], ascii_=n % 2 == 0))
        damaged += [_line(kind, p) for p in bad]
    return valid, damaged


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_kind_of_the_schema_prints_the_same_on_both_paths(seed: int) -> None:
    rng = random.Random(seed)
    valid, damaged = _hostile_lines(rng)
    assert _same(valid) == 0
    assert _same(valid, blank=True) == 0  # not framed as recorded: the array decode
    mixed = valid + damaged
    rng.shuffle(mixed)
    assert _same(mixed, 1000) >= len(damaged) // 2  # the reference sees the damage too
    assert _same(mixed, 0, blank=True) >= len(damaged) // 2


def test_valid_records_of_every_kind_are_printed_by_the_rules_not_one_by_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: a segment of valid records, framed as recorded, is printed from its
    checked decode, never record by record nor from dicts."""
    valid, _ = _hostile_lines(random.Random(9))

    def refuse(*args: Any) -> None:
        raise AssertionError("a valid record went the per-event way")

    want = _per_event(valid, 0)[0]
    monkeypatch.setattr(human, "_per_event", refuse)
    monkeypatch.setattr(human, "_any_segment", refuse)
    assert human.human_bytes(b"\n".join(valid) + b"\n", 0, len(valid), []) == want
    assert len(want.splitlines()) > 3 * len(SCHEMAS)


def test_odd_lines_timestamps_and_bytes_print_the_same() -> None:
    ok = _line("console.info", {"message": "fine"})
    odd = [
        _line("console.info", {"message": "m"}, ts="2026-12-03T04:05:06,789Z"),  # not canonical
        _line("console.info", {"message": "m"}, ts="2026-02-30T04:05:06.789Z"),  # no such day
        _line("console.info", {"message": "m"}, ts="2026-12-03T24:05:06.789Z"),
        _line("console.info", {"message": "m"}, ts="2026-12-03T04:05:06.7Z"),
        _line("console.info", {"message": "lone \ud800 surrogate"}, ascii_=True),
        _line("unknown.kind", {"summary": "s\x1b", "x": 10**30}),
        _line("unknown.kind", {"y": "z" * 400}),
        ok.replace(b'"fine"', b'"fi\xffne"'),  # not UTF-8 in a field
        ok[:-1] + b',"extra":"\xfe"}',  # not UTF-8 in a key no printer reads
        ok[:-1] + b',"extra":1}',
        ok.replace(b'"host":"box"', b'"host":null'),
        ok + b" " + ok,
        b"[1,2]",
        b'{"ts":"' + TS.encode() + b'","kind":"marker"}',
        b"{" * 5000 + b"}" * 5000,
        # a gated kind shown (its whole payload read) with a field no printer reads beside it
        _line("stats.sample", {"host": {}, "gpus": [], "print": True})[:-1] + b',"extra":1}',
        _line("stats.sample", {"host": {}, "print": True})[:-2] + b',"print":false}}',
        _line("stats.sample", {"host": {}, "print": False})[:-2] + b',"print":1}}',
        ok[:-1] + b',"payload":{"message":"second"}}',  # a key twice: the last one counts
        ok.replace(b'"kind"', b'"payload":7,"kind"'),
    ]
    for n in range(len(odd)):
        _same([ok, odd[n], ok])
        _same([ok, odd[n], ok], blank=True)
    assert _same(odd) >= 8


def test_the_segment_check_finds_what_visible_changes() -> None:
    """The one check of a segment's bytes (`_LEADS`, `_CHANGED`) against `visible` itself,
    on every code point below U+3000 in a printed field."""
    for c in range(0x3000):
        if 0xD800 <= c < 0xE000:
            continue
        text = f"a{chr(c)}b"
        raw = text.encode()
        found = len(raw.translate(None, human._LEADS)) != len(raw) and \
            human._CHANGED.search(raw) is not None
        assert found == (visible(text) != text and c != 0x0A), hex(c)
