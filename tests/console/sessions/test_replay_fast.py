"""`console replay --print/--json` on the fast path: the same text as the per-event printer, a
closed pipe ends it quietly, and no TUI without a terminal."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from console.commands.replay import print_session
from console.printer import human_line
from console.sessions.reader import SessionReader
from console.sessions.writer import SessionWriter
from remote.spine.events import Event, JobLines, utc_now
from remote.spine.sanitize import visible

REPO = Path(__file__).resolve().parents[3]


def human_text(data: bytes, first: int, count: int, bad: list[tuple[int, str]]) -> str:
    """`replay --print`'s lines for a segment, joined by newlines (no final one)."""
    from console.sessions.human import human_bytes

    return human_bytes(data, first, count, bad).decode("utf-8")[:-1]


def _awkward_events() -> list[Event]:
    t0 = utc_now()
    ts = [t0 + timedelta(milliseconds=7 * i) for i in range(40)]
    return [
        Event("job.line", "box", {"run_id": "20261202-120000-a-very-long-run-id", "name": "n",
                                  "text": "plain", "offset": 1}, ts[0]),
        Event("job.line", "", {"run_id": "r", "text": "no host"}, ts[1]),
        Event("job.line", "box", {"text": "no run id"}, ts[2]),
        Event("job.line", "box", {"run_id": "r", "text": "caf\u00e9 \U0001f680 \"q\" \\ \x1b[2J"},
              ts[3]),
        Event("job.line", "box", {"run_id": "r", "text": "@@eagle3 {\"stage\":\"x\"}"}, ts[4]),
        # (a job line whose text is not a string is a damaged record since issue 41:
        # tests/test_hostile_inputs.py)
        Event("stats.sample", "box", {"host": {}, "gpus": [{"index": 0, "util": 1}]}, ts[6]),
        Event("stats.sample", "box", {"host": {}, "gpus": [], "print": True,
                                      "summary": "8 gpus idle"}, ts[7]),
        Event("stage.progress", "box", {"stage": "train", "done": 3, "total": 10, "unit": "step",
                                        "rate": 1.5}, ts[8]),
        Event("console.warning", "box", {"message": "careful"}, ts[9]),
        Event("marker", "", {"label": "here"}, ts[10]),
        Event("probe.result", "box", {"probe": "env", "summary": "ok"}, ts[11]),
        Event("probe.result", "box", {"probe": "env", "x": "y" * 300}, ts[12]),
    ]


def _session(tmp_path: Path, events: list[Event]) -> Path:
    path = tmp_path / "s.jsonl"
    with SessionWriter(path, ["box"]) as w:
        for e in events:
            w.write(e)
        w.write_many(JobLines("box", "run-1", "train", [f"line {i}" for i in range(500)],
                              list(range(500)), events[-1].ts))
    return path


def test_fast_human_lines_are_the_printers_lines(tmp_path: Path) -> None:
    path = _session(tmp_path, _awkward_events())
    with SessionReader(path) as r:
        expected = []
        for e in r.events():
            try:
                line = human_line(e)
            except TypeError:  # None run_id: the per-event printer cannot format it
                line = f"{e.ts:%H:%M:%S} [{e.host}] | {e.payload['text']}"
            if line is not None:
                expected.append(visible(line))  # as the Printer: ESC drawn, never obeyed
        out = io.BytesIO()
        assert print_session(r, out, as_json=False) == []  # type: ignore[arg-type]
    assert out.getvalue().decode("utf-8").splitlines() == expected
    assert "\x1b" not in out.getvalue().decode("utf-8")


def test_fast_json_lines_are_the_records_as_written(tmp_path: Path) -> None:
    """--json prints the session's records as the recorder wrote them: a log block is one
    job.lines record, which expands (decode_record) into the same events the reader gives."""
    from console.sessions.decode import decode_record

    events = _awkward_events()
    path = _session(tmp_path, events)
    with SessionReader(path) as r:
        expected = [e.to_json() for e in r.events()]
        out = io.BytesIO()
        assert print_session(r, out, as_json=True) == []  # type: ignore[arg-type]
    printed = out.getvalue().decode("utf-8").splitlines()
    assert printed == path.read_text().splitlines()[1:]
    assert [json.loads(ln)["kind"] for ln in printed][-1] == "job.lines"
    assert len(printed) == len(events) + 1
    assert [e.to_json() for ln in printed for e in decode_record(ln.encode())] == expected
    assert len(expected) == len(events) + 500


def _big_session(tmp_path: Path, n_blocks: int = 400) -> Path:
    path = tmp_path / "big.jsonl"
    t0 = utc_now()
    with SessionWriter(path, ["box"]) as w:
        for b in range(n_blocks):
            w.write_many(JobLines("box", "run-1", "train", [f"step {b}.{i}" for i in range(500)],
                                  list(range(500)), t0 + timedelta(seconds=b)))
    return path


def test_a_closed_pipe_ends_replay_quietly_with_exit_0(tmp_path: Path) -> None:
    path = _big_session(tmp_path)
    # A torn last line: its warning is printed after the last event, so a replay that kept
    # going to the end after the pipe closed would say so on stderr.
    with open(path, "ab") as fh:
        fh.write(b'{"ts":"2026-')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for extra in ([], ["--json"]):
        proc = subprocess.Popen([sys.executable, "-m", "console", "replay", str(path), "--print",
                                 *extra], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert proc.stdout is not None and proc.stderr is not None
        first = [proc.stdout.readline() for _ in range(2)]
        assert all(first)
        proc.stdout.close()  # `| head -2`
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0, err
        assert err == "", err  # no traceback, no "Exception ignored ... BrokenPipeError"


def test_replay_without_a_terminal_never_opens_the_tui(tmp_path: Path) -> None:
    path = _session(tmp_path, _awkward_events())
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "console", "replay", str(path), *args],
                              cwd=REPO, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=60)

    as_json = run("--json")
    assert as_json.returncode == 0, as_json.stderr
    assert [Event.from_json(ln).kind for ln in as_json.stdout.splitlines()][:2] == ["job.line"] * 2
    tui = run()
    assert tui.returncode == 2
    assert "needs a terminal" in tui.stderr and "--print" in tui.stderr



# -- the segment printer against the per-event printer, line for line -------------------------------------

def _typed(lines: list[bytes], first: int) -> tuple[list[str], list[int]]:
    """What the per-event printer makes of raw session lines: decode_event + human_line +
    visible, a bad line reported (the reference the fast path must equal)."""
    from console.errors import BadLine
    from console.sessions.decode import decode_record

    out: list[str] = []
    bad: list[int] = []
    for i, raw in enumerate(lines):
        try:
            shown = []
            for e in decode_record(raw):  # a job.lines record: its job.line events
                if e.kind == "job.line" and e.payload.get("run_id") is None \
                        and isinstance(e.payload.get("text"), str):
                    e = Event(e.kind, e.host, {**e.payload, "run_id": ""}, e.ts)  # shown as ''
                shown.append(human_line(e))
        except (BadLine, TypeError, ValueError, AttributeError, KeyError):
            bad.append(first + i)
            continue
        out.extend(visible(line) for line in shown if line is not None)
    return out, bad


def _job_block(ts: str, texts: list[str], *, host: str = "box", run: str = "run-1") -> list[bytes]:
    when = datetime.fromisoformat(ts[:-1]).replace(tzinfo=UTC)
    return JobLines(host, run, "train", texts, list(range(len(texts))), when).to_jsonl() \
        .encode().splitlines()


def _every_kind(ts: str) -> list[bytes]:
    from remote.spine import events as ev
    when = datetime.fromisoformat(ts[:-1]).replace(tzinfo=UTC)
    kinds = sorted({v for k, v in vars(ev).items()
                    if k.isupper() and isinstance(v, str) and ("." in v or v == ev.MARKER)})
    payloads: list[dict[str, object]] = [
        {"summary": "a summary"}, {"message": "a message"}, {"label": "here"},
        {"stage": "train", "done": 3, "total": 10, "unit": "step", "rate": 1.5},
        {"x": "y" * 300}, {"text": "t", "run_id": "r"}, {"print": True, "summary": "gpus",
                                                          "gpus": []}]
    return [Event(k, "box", payloads[n % len(payloads)], when).to_json().encode()
            for n, k in enumerate(kinds)]


MALFORMED = [
    b'{"ts":"2026-12-03T04:00:00.000Z","host":"box","kind":"job.line","payload":{"run_id":"r",'
    b'"name":"train","text":"a"b","offset":1}}',  # a raw quote in the text
    b'{"ts":"2026-12-03T04:00:00.000Z","host":"box","kind":"job.line","payload":{"run_id":"r",'
    b'"name":"train","text":"tab\there","offset":2}}',  # a raw control character
    b'{"ts":"2026-12-03T04:00:00.000Z","host":"box","kind":"job.line","payload":{"run_id":"r",'
    b'"name":"train","text":"zero","offset":03}}',  # a number JSON does not allow
    b'{"ts":"2026-12-03T04:00:00.000Z","host":"box","kind":"job.line","payload":{"run_id":"r",'
    b'"name":"train","text":"cut","offs',  # torn
    b'{"ts":"2026-12-03T04:00:00.000Z","host":"box","kind":"job.line","payload":{"run_id":"r",'
    b'"name":"train","text":"","offset":4}}',  # empty text (valid)
    b'{"ts":"2026-12-03T04:00:00.000Z","host":"box","kind":"job.line","payload":{"run_id":"r",'
    b'"name":"train","text":"extra key","offset":5,"more":1}}',  # valid, another shape
    b'{"ts":"2026-12-03T04:00:00.000Z","host":"box","kind":"job.line","payload":{"run_id":"r",'
    b'"name":"train","text":"neg","offset":-1}}',  # valid, not the recorder's shape
    b'{"ts":"2026-12-03T04:00:00.000Z","host":"box","kind":"job.line","payload":{"run_id":"r",'
    b'"name":"train","text":"x","offset":6}}}',  # one brace too many
    b'{"ts":"2026-12-03T04:00:00.000Z","host":"b\x01x","kind":"job.line","payload":{"run_id":'
    b'"r","name":"train","text":"ctl in host","offset":7}}',
    b'{"ts":"2026-12-03T04:00:00.0Z","host":"box","kind":"job.line","payload":{"run_id":"r",'
    b'"name":"train","text":"short ts","offset":8}}',
    b'["not", "an", "object"]',
    b'{"ts":"2026-12-03T04:00:00.000Z","host":"box","kind":"job.line","payload":{"run_id":"r",'
    b'"name":"train","text":"two","offset":9}},{"ts":"x"}',
]


def _blocks() -> dict[str, list[bytes]]:
    ts = "2026-12-03T04:00:00.000Z"
    plain = [f"step {i} loss 0.{i:04d}" for i in range(300)]
    return {
        "log only": _job_block(ts, plain),
        "two runs, no host, every kind": _job_block(ts, plain[:50]) + _every_kind(ts)
        + _job_block("2026-12-03T04:00:01.000Z", plain[:50], host="", run="r" * 40)
        + _job_block("2026-12-03T04:00:02.000Z", plain[:50], run="other-run"),
        "escapes": _job_block(ts, [*plain[:20], 'he said "hi"', "back\\slash", "\x1b[2J esc",
                                          "tqdm\rbar", "multi\nline"]),
        "stage records": _job_block(ts, [*plain[:20], '@@eagle3 {"stage":"x"}', "mail a@b"]),
        "C1, bidi, zero width": _job_block(ts, [*plain[:20], "c1 \x9b[2J", "bidi \u202eabc",
                                                       "zw \u200b", "caf\u00e9 \U0001f680"]),
        "malformed": _job_block(ts, plain[:20]) + MALFORMED + _job_block(ts, plain[20:40]),
        "malformed, quiet otherwise": MALFORMED[:3] + _job_block(ts, plain[:10]),
        # no quote, control character or escape anywhere: only the per-line shape checks
        # stand between these and the segment printer
        "malformed, all printable": _job_block(ts, plain[:20]) + MALFORMED[2:]
        + _job_block(ts, plain[20:40]),
    }


def test_cut_lines_equal_the_typed_printer_on_every_kind_and_bad_line() -> None:
    for name, lines in _blocks().items():
        for first in (0, 1000):
            data = b"\n".join(lines) + b"\n"
            bad: list[tuple[int, str]] = []
            got = human_text(data, first, len(lines), bad)
            want, want_bad = _typed(lines, first)
            assert (got.split("\n") if got else []) == want, name
            assert [i for i, _ in bad] == want_bad, (name, bad)
    # the malformed lines are malformed for the typed path too (the reference is not vacuous)
    assert len(_typed(MALFORMED, 0)[1]) >= 6


def test_replay_print_of_a_day_session_equals_the_typed_printer(tmp_path: Path) -> None:
    """A recorded day (log blocks, stats samples, every kind, malformed lines spliced in, a
    segment boundary crossed): the whole `replay --print` output against the typed path."""
    path = tmp_path / "day.jsonl"
    t0 = utc_now()
    with SessionWriter(path, ["box"]) as w:
        for second in range(30):  # ~1.2 MB: block records are ~2.5x smaller than lines
            ts = t0 + timedelta(seconds=second)
            w.write_many(JobLines("box", "20261202-120000-train-abcdef", "train",
                                  [f"step {second}.{i} loss {i / 7:.5f} " + "x" * (i % 90)
                                   for i in range(500)], list(range(500)), ts))
            for tick in range(10):
                w.write(Event("stats.sample", "box", {"host": {}, "gpus": [{"index": g, "util": g}
                                                               for g in range(8)]},
                              ts + timedelta(milliseconds=100 * tick)))
    from remote.spine.events import format_ts
    extra = b"\n".join(_every_kind(format_ts(t0)) + MALFORMED) + b"\n"
    with open(path, "ab") as fh:
        fh.write(extra)
    lines = [ln for ln in path.read_bytes().split(b"\n")[1:] if ln]
    want, want_bad = _typed(lines, 0)
    with SessionReader(path, write_index=False) as r:
        assert len(r._segments) >= 2  # the day crosses a segment boundary
        out = io.BytesIO()
        bad = print_session(r, out, as_json=False)  # type: ignore[arg-type]
    assert bad is not None and [i for i, _ in bad] == want_bad
    assert out.getvalue().decode("utf-8").splitlines() == want
    assert len(want) > 6000


def _edited(line: str, rng: random.Random, chars: list[str]) -> list[bytes]:
    """`line` with one character of `chars` put in, or one taken out or replaced, at a random
    place; a put-in newline makes two lines."""
    at = rng.randrange(len(line) + 1)
    edit = rng.choice(["insert", "delete", "replace"])
    ch = rng.choice(chars)
    if edit == "insert":
        line = line[:at] + ch + line[at:]
    elif edit == "delete":
        line = line[:at] + line[at + 1 :]
    else:
        line = line[:at] + ch + line[at + 1 :]
    return [ln for ln in line.encode().split(b"\n") if ln]


def _cut_path_against_typed(mutated: Iterable[list[bytes]]) -> int:
    """human_text (the segment printer) says what the per-event printer says of every
    line of every group; returns how many groups held a bad line."""
    differing = 0
    for lines in mutated:
        data = b"\n".join(lines) + b"\n"
        bad: list[tuple[int, str]] = []
        got = human_text(data, 0, len(lines), bad)
        want, want_bad = _typed(lines, 0)
        assert (got.split("\n") if got else []) == want, lines
        assert [i for i, _ in bad] == want_bad, (lines, bad)
        differing += bool(want_bad)
    return differing


def _mutated_blocks(seed: int, n: int) -> list[list[bytes]]:
    """Log blocks in the recorder's shape with one byte-level edit each (a character put in,
    taken out or replaced anywhere in a line) next to untouched batches: every check of the
    segment printer has to catch what it is there for, or the output differs from the typed one."""
    import random

    rng = random.Random(seed)
    chars = ['"', "\\", "}", "{", "0", "9", ",", ":", " ", "\x7f", "\x01", "\t", "\u202e",
             "\x9b", "\u00e9", "@@eagle3 ", '","offset":', "\n"]
    blocks = []
    for b in range(n):
        ts = f"2026-12-03T04:{b % 60:02d}:{b % 59:02d}.{b % 1000:03d}Z"
        start = rng.choice([0, 5, 95, 995, 9_999_990])  # offsets that change digit count
        texts = [f"step {i} loss {rng.random():.4f}" for i in range(rng.randint(1, 30))]
        when = datetime.fromisoformat(ts[:-1]).replace(tzinfo=UTC)
        lines = JobLines("box", "run-1", "train", texts,
                         [start + 3 * i for i in range(len(texts))],
                         when).to_jsonl().encode().splitlines()
        k = rng.randrange(len(lines))
        parts = _edited(lines[k].decode(), rng, chars)
        lines[k : k + 1] = parts
        after = _job_block(ts, texts[:3])  # the same batch prefix again, after the edit
        blocks.append(lines + after)
    return blocks


def test_cut_path_equals_the_typed_printer_under_random_edits() -> None:
    differing = _cut_path_against_typed(_mutated_blocks(17, 1500))
    assert differing > 300  # the edits do break lines (the comparison is not vacuous)


def _at(lines: list[bytes], ts: bytes) -> list[bytes]:
    """Recorded lines with their timestamp's characters replaced by `ts` (any length)."""
    return [b'{"ts":"' + ts + ln[31:] for ln in lines]


def test_cut_path_edge_shapes() -> None:
    """Shapes the group checks exist for: a batch prefix seen again after a foreign line (two
    batches in one millisecond), offsets whose digit count changes inside a batch, an empty
    text, the text's opening quote doubling as the offset key's, an escape in the timestamp."""

    ts = "2026-12-03T04:00:00.000Z"
    when = datetime.fromisoformat(ts[:-1]).replace(tzinfo=UTC)
    texts = [f"t{i}" for i in range(40)]
    batch = JobLines("box", "run-1", "train", texts, list(range(90, 130)), when) \
        .to_jsonl().encode().splitlines()
    sample = Event("stats.sample", "box", {"host": {}, "gpus": []}, when).to_json().encode()
    head = batch[0][: batch[0].index(b'"text":"') + 8]
    cases = {
        "same prefix twice": [*batch[:20], sample, *batch[20:]],
        "digits change": batch,
        "empty text": [*batch[:5], head + b'","offset":7}}', *batch[5:10]],
        "quote shared": [*batch[:5], head[:-1] + b'","offset":7}}', *batch[5:10]],
        "quote shared, same digits": [*batch[:5], head[:-1] + b'","offset":97}}',
                                      *batch[5:10]],
        "empty texts, same digits": [*batch[:5], head + b'","offset":97}}', *batch[5:10]],
        "empty offset": [*batch[:5], head + b'x","offset":}}', *batch[5:10]],
        "escaped ts": [*batch[:3], b'{"ts":"2026-12-03T04:00:00.0\\u0030Z' + batch[0][31:],
                       *batch[3:6]],
        "DEL and tab": [*batch[:3], head + b'a\x7fb","offset":1}}', head + b'a\tb","offset":1}}',
                        *batch[3:6]],
        # the next batch of the same log shares everything after the timestamp with the last
        # one (the printer skips matching it again): only its timestamp may differ, and how
        "next batch": [*batch[:5], *_at(batch[5:10], b"2026-12-03T04:00:01.250Z")],
        "next batch, no such date": [*batch[:5], *_at(batch[5:10], b"2026-02-30T04:00:01.250Z")],
        "next batch, control in ts": [*batch[:5], *_at(batch[5:10], b"2026-12-03T04:00\x01.250Z")],
        "next batch, short ts": [*batch[:5], *_at(batch[5:10], b"2026-12-03T04:00:01.25Z")],
        "next batch, quote in ts": [*batch[:5], *_at(batch[5:10], b'2026-12-03T04:00:0"1.25Z')],
        "next batch, other host": [*batch[:5], *(ln.replace(b'"box"', b'"bux"', 1)
                                                for ln in batch[5:10]), *batch[10:12]],
    }
    _cut_path_against_typed(cases.values())


def test_timestamp_check_per_second_agrees_with_the_parser() -> None:
    """`_ts_ok` checks the usual shape once per second; on timestamps with one or two
    characters changed anywhere (dates that do not exist included) it must say what parsing
    says."""
    import random

    from console.sessions.decode import _parses, _ts_ok

    rng = random.Random(1)
    base = "2026-12-03T04:05:06.789Z"
    accepted = 0
    for _ in range(20_000):
        ts = list(base)
        for _ in range(rng.randint(1, 2)):
            ts[rng.randrange(len(ts))] = rng.choice("0123456789-:.TZ+ x")
        text = "".join(ts)
        assert _ts_ok(text) == _parses(text), text
        accepted += _ts_ok(text)
    for text in ("2026-02-29T00:00:00.000Z", "2024-02-29T00:00:00.000Z",
                 "2026-12-03T24:00:00.000Z", "2026-12-03T04:05:06.7\u0661\u0662Z"):
        assert _ts_ok(text) == _parses(text), text
    assert 1000 < accepted < 19_000


# -- job.lines records (a log block as one record) ------------------------------------------

def _day_events(t0: datetime) -> list[JobLines | Event]:
    """A few seconds of a day as the tail publishes it: log blocks (one awkward), samples, a
    stage record, a marker."""
    out: list[JobLines | Event] = []
    for second in range(6):
        ts = t0 + timedelta(seconds=second)
        texts = [f"step {second}.{i} loss {i / 7:.5f}" for i in range(120)]
        if second == 3:
            texts[5:8] = ["esc \x1b[2J", '@@eagle3 {"stage":"x"}', 'q "x" \\ caf\u00e9 \u202e']
        out.append(JobLines("box", "20261202-120000-train-abcdef", "train", texts,
                            list(range(100 * second, 100 * second + len(texts))), ts))
        out.append(Event("stats.sample", "box", {"host": {}, "gpus": [{"index": 0, "util": second}]}, ts))
        out.append(JobLines("box", "r2", "eval", [f"one line {second}"], [second], ts))
    out.append(Event("marker", "box", {"label": "end"}, t0 + timedelta(seconds=7)))
    return out


def _write_old_and_new(tmp_path: Path, suffix: str) -> tuple[Path, Path, list[Event]]:
    """The same events recorded as sessions were before job.lines records (a job.line line per
    log line: the bytes JobLines.to_jsonl makes, which the recorder wrote, one write a block)
    and as the recorder writes them now."""
    t0 = datetime(2026, 12, 3, 4, 0, tzinfo=UTC)
    old, new = tmp_path / f"old{suffix}", tmp_path / f"new{suffix}"
    flat: list[Event] = []
    with SessionWriter(old, ["box"], started=t0) as wo, \
            SessionWriter(new, ["box"], started=t0) as wn:
        for item in _day_events(t0):
            if isinstance(item, JobLines):
                wo._write_bytes(item.to_jsonl().encode(), len(item))
                wn.write_many(item)
                flat.extend(item)
            else:
                wo.write(item)
                wn.write(item)
                flat.append(item)
    return old, new, flat


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
def test_old_line_per_event_sessions_replay_the_same(tmp_path: Path, suffix: str) -> None:
    old, new, flat = _write_old_and_new(tmp_path, suffix)
    printed = {}
    with SessionReader(old) as ro, SessionReader(new) as rn:
        assert list(ro.events()) == flat == list(rn.events())
        assert len(ro) == len(flat) and len(rn) < len(flat) / 10  # positions count records
        assert [ro.event(i) for i in ro.markers()] == [rn.event(i) for i in rn.markers()]
        for name, r in (("old", ro), ("new", rn)):
            for as_json in (False, True):
                out = io.BytesIO()
                assert print_session(r, out, as_json=as_json) == []  # type: ignore[arg-type]
                printed[name, as_json] = out.getvalue()
    assert printed["old", False] == printed["new", False]
    assert b"\x1b" not in printed["new", False] and b"@@eagle3" not in printed["new", False]
    # --json: the records as written; an old file's are its event lines, byte for byte
    assert printed["old", True] == b"".join(e.to_json().encode() + b"\n" for e in flat)
    from console.sessions.decode import decode_record

    assert [e for ln in printed["new", True].splitlines() for e in decode_record(ln)] == flat


def _mutated_records(seed: int, n: int) -> list[list[bytes]]:
    """job.lines records with one byte-level edit each, beside an untouched record, a quiet
    sample and a single job.line: the printer's record path must say what the per-event
    printer says of every one (text, or a bad line)."""
    import random

    rng = random.Random(seed)
    chars = ['"', "\\", "]", "[", "}", "{", "0", "9", "-", ".", ",", ":", " ", "\x7f", "\x01",
             "\t", "\u202e", "\x9b", "\u00e9", "@@eagle3 ", '","offsets":[', '"texts":[',
             "\n", "null", "1e3"]
    out = []
    for b in range(n):
        when = datetime(2026, 12, 3, 4, b % 60, b % 59, tzinfo=UTC)
        texts = [f"step {i} loss {rng.random():.4f}" for i in range(rng.randint(2, 30))]
        start = rng.choice([0, 5, 95, 9_999_990])
        rec = JobLines("box", "run-1", "train", texts,
                       [start + 3 * i for i in range(len(texts))], when).to_records()
        parts = _edited(rec.rstrip("\n"), rng, chars)
        clean = JobLines("box", "run-1", "train", texts[:2], [1, 2], when).to_records()
        sample = Event("stats.sample", "box", {"host": {}, "gpus": []}, when).to_json()
        single = Event("job.line", "box", {"run_id": "r", "name": "n", "text": "x",
                                           "offset": 1}, when).to_json()
        out.append([clean.rstrip("\n").encode(), *parts, sample.encode(), single.encode()])
    return out


def test_record_path_equals_the_typed_printer_under_random_edits() -> None:
    mutated = _mutated_records(23, 1500)
    for lines in mutated:  # the record path, not the per-line one
        assert any(b'"kind":"job.lines"' in ln for ln in lines)
    differing = _cut_path_against_typed(mutated)
    assert differing > 300  # the edits do break records (the comparison is not vacuous)


def test_a_malformed_record_is_a_bad_line_for_every_reader(tmp_path: Path) -> None:
    """texts and offsets of different lengths, texts that are not strings, an empty block:
    reported by --print and by the reader (skipped, with a warning), never raised."""
    path = tmp_path / "s.jsonl"
    t0 = datetime(2026, 12, 3, 4, 0, tzinfo=UTC)
    with SessionWriter(path, ["box"], started=t0) as w:
        w.write_many(JobLines("box", "r", "n", ["a", "b"], [1, 2], t0))
    good = path.read_text().splitlines()[1]
    broken = [good.replace('"offsets":[1,2]', '"offsets":[1]'),
              good.replace('"texts":["a","b"]', '"texts":["a",2]'),
              good.replace('"texts":["a","b"]', '"texts":[]').replace("[1,2]", "[]")]
    with open(path, "a") as fh:
        fh.write("\n".join([*broken, good]) + "\n")
    with SessionReader(path) as r:
        assert [e.payload["text"] for e in r.events()] == ["a", "b", "a", "b"]
        assert [w.split(" is corrupt")[0] for w in r.warnings] == ["event 1", "event 2",
                                                                   "event 3"]
        out = io.BytesIO()
        bad = print_session(r, out, as_json=False)  # type: ignore[arg-type]
        assert bad is not None and [i for i, _ in bad] == [1, 2, 3]
        assert "2 texts but 1 offsets" in bad[0][1]
        assert out.getvalue().decode().count("| ") == 4
        from console.errors import SessionFormatError

        with pytest.raises(SessionFormatError, match="event 1 is corrupt"):
            r.record(1)
