"""`replay --print`'s segment printer (console/sessions/human.py `human_bytes`) against the
per-event printer (decode_record + printer.human_line + visible) on the recorded demo run and
on a synthetic mix of every kind with escapes, controls, bidi, unicode and redacted secrets."""

from __future__ import annotations

import random

from console.sessions.human import human_bytes
from remote.spine.events import Event, JobLines, parse_ts
from tests.console.sessions.test_replay_fast import _every_kind, _typed, human_text
from tests.console.sessions.test_replay_real import RECORDED


def _check(lines: list[bytes]) -> None:
    data = b"\n".join(lines) + b"\n"
    bad: list[tuple[int, str]] = []
    got = human_bytes(data, 0, len(lines), bad)
    want, want_bad = _typed(lines, 0)
    assert got == "".join(line + "\n" for line in want).encode()
    assert [i for i, _ in bad] == want_bad


def test_the_recorded_run_through_the_fast_path_equals_the_per_event_printer() -> None:
    body = [ln for ln in RECORDED.read_bytes().split(b"\n")[1:] if ln]
    _check(body)


def _check_general(lines: list[bytes]) -> None:
    """The same lines with a blank line after them: not framed as the recorder frames a
    segment, so decoded as one JSON array of its lines."""
    data = b"\n".join(lines) + b"\n\n"
    bad: list[tuple[int, str]] = []
    got = human_text(data, 0, len(lines), bad)
    want, want_bad = _typed(lines, 0)
    assert (got.split("\n") if got else []) == want
    assert [i for i, _ in bad] == want_bad


def test_a_synthetic_mix_of_every_kind_equals_the_per_event_printer() -> None:
    when = parse_ts("2026-12-03T23:59:59.999Z")
    odd = ["plain", "caf\u00e9 \u00d7 \U0001f680", "esc \x1b[2J", "c1 \x9b[2J", "bidi \u202eabc",
           "zw \u200b", "tab\there", "multi\nline", "quote \" back \\", "token=[REDACTED]",
           "\u2026 \u2192 arrow", "@@eagle3 {\"stage\":\"x\"}", ""]
    lines: list[bytes] = []
    for n, text in enumerate(odd):
        host = ["local", "", "b\u202eox"][n % 3]
        lines += [
            Event("job.line", host, {"run_id": "r" * 30, "name": "n", "text": text,
                                     "offset": n}, when).to_json().encode(),
            Event("console.info", host, {"message": text}, when).to_json().encode(),
            Event("console.error", host, {"message": text}, when).to_json().encode(),
            Event("stage.end", host, {"summary": text, "message": "m"}, when).to_json().encode(),
            Event("patch.verified", host, {"summary": text, "drift": n % 2 == 0},
                  when).to_json().encode(),
            Event("stage.progress", host, {"stage": text, "done": n, "total": 7, "unit": text,
                                           "rate": [1.5, 1234.5, 3, None, 0.0][n % 5]},
                  when).to_json().encode(),
            Event("marker", host, {"label": text}, when).to_json().encode(),
            Event("upload.progress", host, {"path": text, "done": [n, 3 << 20][n % 2],
                                            "total": [n, 3 << 20, "x"][n % 3]},
                  when).to_json().encode(),
        ]
    lines += _every_kind("2026-12-03T04:00:00.000Z")
    lines += JobLines("box", "run", "n", odd, list(range(len(odd))), when).to_records() \
        .encode().splitlines()
    _check(lines)
    rng = random.Random(5)
    for _ in range(20):
        _check(rng.sample(lines, len(lines)))


def test_one_odd_field_in_a_clean_segment_is_drawn_as_the_per_event_printer_draws_it() -> None:
    """The segment's text is checked once; a newline in a field (which must be drawn as `␊`,
    not start a line) or a control character in a line made from typed fields must still be
    found when every other line of the segment is clean."""
    when = parse_ts("2026-12-03T04:00:00.000Z")
    block = JobLines("box", "run", "n", ["clean", "lines"], [0, 1], when).to_records() \
        .encode().splitlines()
    for text in ["multi\nline", "cr\rhere", "esc \x1b[2J", "bidi \u202eabc", "tab\there",
                 "nul \x00", "del \x7f", "c1 \x9b"]:
        for event in [Event("job.line", "box", {"run_id": "r", "text": text}, when),
                      Event("console.warning", "", {"message": text}, when),
                      Event("stage.end", "box", {"summary": text}, when),
                      Event("marker", "box", {"label": text}, when),
                      Event("stage.progress", "", {"stage": text, "done": 1, "total": 3,
                                                   "unit": "u", "rate": 2.5}, when)]:
            clean = Event("console.info", "box", {"message": "fine"}, when).to_json().encode()
            _check([*block, clean, event.to_json().encode(), clean])
            _check_general([*block, clean, event.to_json().encode(), clean])


def test_progress_percentages_equal_the_float_format() -> None:
    when = parse_ts("2026-12-03T04:00:00.000Z")
    rng = random.Random(7)
    pairs = [(d, t) for t in range(1, 120) for d in range(0, t + 2)]
    pairs += [(rng.randrange(0, 10**13), rng.randrange(1, 10**13)) for _ in range(2000)]
    pairs += [(3, 2000), (1, 16), (1, 8), (999, 1000), (9995, 10000), (19999, 20000)]
    lines = [Event("stage.progress", "h", {"stage": "s", "done": d, "total": t, "unit": "u"},
                   when).to_json().encode() for d, t in pairs]
    _check(lines)


def test_progress_rates_equal_the_float_format() -> None:
    """A rate is formatted by `%.3g` inside the segment's one `%`, the per-event printer's by
    format(); the same for every float, near the `1e+03` edge and the rounding ties too."""
    when = parse_ts("2026-12-03T04:00:00.000Z")
    rng = random.Random(11)
    rates = [rng.uniform(-1000, 1000) for _ in range(1500)]
    rates += [round(rng.uniform(0, 100), 3) for _ in range(1500)]
    rates += [999.4999, 999.5, 999.5000001, -999.5, 1e-5, -1e-5, 0.5, 100.5, 101.5, 2.675,
              1.005, 12.345, 0.0001234, 5e-324, 123456.0, 1000.0, -0.0]
    lines = [Event("stage.progress", ["h", ""][n % 2], {"stage": "s", "done": n % 9,
                                                       "total": 8, "unit": "u", "rate": r},
                   when).to_json().encode() for n, r in enumerate(rates)]
    _check(lines)


def test_a_byte_that_is_not_utf8_in_a_field_no_printer_reads_is_a_bad_line_as_per_event() -> None:
    """The typed decoders skip the fields they do not read without looking at their bytes: a
    damaged byte in a job line's `name` or in a payload key of its own was printed by the fast
    paths where the per-event printer reports the line as bad (exit 1). Each path, with and
    without a log block in the segment, now equals the per-event printer."""
    when = parse_ts("2026-12-03T23:59:59.999Z")
    clean = [Event("job.line", "box", {"run_id": "r1", "name": "n", "text": f"line {i}",
                                       "offset": i}, when).to_json().encode() for i in range(4)]
    clean.append(Event("console.info", "box", {"message": "caf\u00e9", "extra": "x"},
                       when).to_json().encode())
    broken = list(clean)
    broken[1] = broken[1].replace(b'"name":"n"', b'"name":"\xff"')
    broken[4] = broken[4].replace(b'"extra":"x"', b'"extra":"\xfe"')
    block = JobLines("box", "r2", "n", ["a", "b"], [1, 2], when).to_records().encode().splitlines()
    for lines in (broken, broken + block):
        want, want_bad = _typed(lines, 10)
        assert want_bad == [11, 14]  # the reference sees both
        data = b"\n".join(lines) + b"\n"
        for made in (human_text, human_bytes):
            bad: list[tuple[int, str]] = []
            got = made(data, 10, len(lines), bad)
            text = got.decode() if isinstance(got, bytes) else got + "\n"
            assert text == "".join(line + "\n" for line in want), (made.__name__, text)
            assert [i for i, _ in bad] == want_bad, (made.__name__, bad)
