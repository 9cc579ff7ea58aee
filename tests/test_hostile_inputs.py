"""Hostile input at the edges (issue 41, points 2 and 6): each damaged record is a row, run
through every reader that meets it.

A row is (the record, the one warning line expected, the exit expected); each runs on
`console replay --print`, `--json`, the TUI's model (ConsoleState folded from the reader, as
the TUI's replay folds it) and `console report`, and for job output on `jobs tail` over the
local host. Nothing lost: the good records around the damaged one still come out, in order.
The fast `--print` paths are held to the per-event path's verdict on every row.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import aclosing
from pathlib import Path

import pytest

from console.errors import BadLine
from console.printer import human_line
from console.sessions.decode import decode_record
from console.sessions.reader import SessionReader
from console.sessions.writer import SessionWriter
from console.tui.model import ConsoleState
from remote.jobs.client import Jobs
from remote.link.transport import LocalTransport
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.sanitize import visible

REPO = Path(__file__).resolve().parents[1]
TS = "2026-01-01T00:00:01.000Z"
HEADER = {"format": "eagle3-console-session", "version": 1, "started": "2026-01-01T00:00:00.000Z",
          "hosts": ["box"], "console_version": "0.1"}


def _line(kind: object, payload: object, ts: str = TS, host: str = "box") -> bytes:
    return json.dumps({"ts": ts, "host": host, "kind": kind, "payload": payload},
                      separators=(",", ":")).encode()


def _job(text: str, offset: int) -> bytes:
    return _line("job.line", {"run_id": "r1", "name": "n", "text": text, "offset": offset})


BLOCK = _line("job.lines", {"run_id": "r1", "name": "n", "texts": ["block a", "block b"],
                            "offsets": [20, 28]})
BEFORE, AFTER = _job("before", 7), _job("after", 40)

# (id, the damaged line, what its one warning says)
SESSION_ROWS = [
    ("kind-5", b'{"ts":"' + TS.encode() + b'","host":"box","kind":5,"payload":{}}',
     "'kind' and 'ts' must be strings"),
    ("ts-9999-99-99", _line("marker", {"label": "x"}, ts="9999-99-99T00:00:00.000Z"),
     "bad timestamp '9999-99-99"),
    ("invalid-utf8", b'{"ts":"' + TS.encode() + b'","host":"box","kind":"job.line","payload":'
     b'{"run_id":"r1","name":"\xff\xfe","text":"x","offset":1}}', "UTF-8"),
    ("job.lines-texts-offsets", _line("job.lines", {"run_id": "r1", "name": "n",
                                                    "texts": ["a", "b"], "offsets": [1]}),
     "job.lines record: 2 texts but 1 offsets"),
    ("job.line-payload-list", _line("job.line", [1, 2]), "payload must be an object"),
    ("job.line-text-5", _line("job.line", {"run_id": "r1", "name": "n", "text": 5, "offset": 1}),
     "job.line payload does not match its schema: Expected `str`, got `int` - at `$.text`"),
    ("stage.end-seconds-x", _line("stage.end", {"stage": "t", "seconds": "x", "summary": "done"}),
     "at `$.seconds`"),
    ("stage.progress-done-x", _line("stage.progress", {"stage": "t", "done": "x", "total": 2}),
     "at `$.done`"),
    ("stage.progress-no-stage", _line("stage.progress", {"done": 1, "total": 2}),
     "missing required field `stage`"),
    ("console.info-stage-5", _line("console.info", {"message": "hi", "stage": 5}),
     "at `$.stage`"),
    ("stats.sample-host-5", _line("stats.sample", {"host": 5}), "at `$.host`"),
    ("stage.start-reason-5", _line("stage.start", {"stage": "t", "reason": 5}), "at `$.reason`"),
    ("stage.end-ok-x", _line("stage.end", {"stage": "t", "ok": "x"}), "at `$.ok`"),
    ("stage.manifest-outputs-x", _line("stage.manifest", {"stage": "t", "outputs": "x"}),
     "at `$.outputs`"),
    ("stage.manifest-reason-null", _line("stage.manifest", {"stage": "t", "reason": None}),
     "at `$.reason`"),
    ("console.error-no-message", _line("console.error", {"stage": "t"}),
     "missing required field `message`"),
    ("job.started-argv-null", _line("job.started", {"run_id": "r", "name": "n", "argv": None}),
     "at `$.argv`"),
    ("job.exit-state-null", _line("job.exit", {"run_id": "r", "state": None}), "at `$.state`"),
    ("pipeline.run-no-run_id", _line("pipeline.run", {"how": "started"}),
     "missing required field `run_id`"),
    ("connection.up-attempt-null", _line("connection.up", {"attempt": None}), "at `$.attempt`"),
    ("connection.retry-delay-x", _line("connection.retry", {"attempt": 1, "delay": "x"}),
     "at `$.delay`"),
    ("bench.point-acceptance-x", _line("bench.point", {"label": "a", "acceptance": "x"}),
     "at `$.acceptance`"),
    ("bench.point-acceptance-list", _line("bench.point", {"label": "a", "acceptance": [1]}),
     "at `$.acceptance`"),
    ("garbage-5MB", b"x" * 5_000_000, "not JSON"),
]
GOOD_TEXTS = ["before", "block a", "block b", "after"]


def _session(tmp_path: Path, bad: bytes, *, block: bool = True) -> Path:
    path = tmp_path / "s.jsonl"
    lines = [json.dumps(HEADER).encode(), BEFORE, *([BLOCK] if block else []), bad, AFTER]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _console(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, errors="replace")


def _warnings(stderr: str) -> list[str]:
    return [w for w in stderr.splitlines() if w.startswith("warning:")]


@pytest.mark.parametrize(("row", "bad", "why"), SESSION_ROWS, ids=[r[0] for r in SESSION_ROWS])
def test_a_damaged_session_record_is_one_warning_everywhere(tmp_path: Path, row: str, bad: bytes,
                                                            why: str) -> None:
    path = _session(tmp_path, bad)
    bad_line = 4  # header, before, block, the damaged record
    # replay --print
    done = _console("replay", str(path), "--print")
    warned = _warnings(done.stderr)
    assert done.returncode == 1, done.stderr
    assert len(warned) == 1 and f"(line {bad_line})" in warned[0] and why in warned[0], warned
    shown = [ln.split("| ", 1)[1] for ln in done.stdout.splitlines() if "| " in ln]
    assert shown == GOOD_TEXTS
    # replay --json: the same verdict, the good records as written
    done = _console("replay", str(path), "--json")
    warned = _warnings(done.stderr)
    assert done.returncode == 1, done.stderr
    assert len(warned) == 1 and f"(line {bad_line})" in warned[0] and why in warned[0], warned
    assert done.stdout.encode().splitlines() == [BEFORE, BLOCK, AFTER]
    # the TUI's model, folded record by record from the reader (what a replay's seek folds)
    with SessionReader(path) as reader:
        state = ConsoleState(reader.header.hosts)
        for record in reader.records():
            state.apply_batch(record)
        assert len(reader.warnings) == 1 and f"(line {bad_line})" in reader.warnings[0]
    assert state.events_seen == len(GOOD_TEXTS)
    # console report (in process: the page and its warnings; the CLI's exit is checked below)
    from console.report.page import render

    found: list[str] = []
    page = render(path, found)
    assert len(found) == 1 and why in found[0] and f"(line {bad_line})" in found[0]
    assert "Host box" in page


def test_console_report_warns_and_exits_1_on_damage(tmp_path: Path) -> None:
    fourteen = tmp_path / "fourteen.jsonl"
    fourteen.write_bytes(b"\n".join([json.dumps(HEADER).encode(), BEFORE, *[b"{bad"] * 14, AFTER])
                         + b"\n")
    done = _console("report", str(fourteen), "--out", str(tmp_path / "r.html"))
    warned = _warnings(done.stderr)
    assert done.returncode == 1 and "report written" in done.stdout
    assert len(warned) == 14 and all("is corrupt and was skipped" in w for w in warned)
    assert "(line 3)" in warned[0] and "(line 16)" in warned[-1]


def test_report_survives_a_loss_it_cannot_draw(tmp_path: Path) -> None:
    from console.report.page import render

    path = tmp_path / "loss.jsonl"
    path.write_bytes(b"\n".join([json.dumps(HEADER).encode(), *[
        _line("stage.progress", {"stage": "train", "done": d, "total": 2, "loss": loss})
        for d, loss in ((1, 1e308), (2, -1e308))]]) + b"\n")
    found: list[str] = []
    page = render(path, found)
    assert found == ["host box: the loss curve chart was left out: its values cannot be drawn "
                     "(arange: cannot compute length)"]
    assert "<h3>Stages</h3>" in page


def test_a_corrupted_zstd_frame_is_a_warning_in_replay_and_report(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.zst"
    with SessionWriter(path, ["box"], compress=True) as w:
        for i in range(30_000):  # ~3 MB of JSON lines: three frames or more
            w.write(ev.Event("job.line", "box", {"run_id": "r1", "name": "n",
                                                 "text": f"line {i} " + "ab" * (i % 40),
                                                 "offset": i}))
    data = bytearray(path.read_bytes())
    magic = b"\x28\xb5\x2f\xfd"
    second = data.index(magic, data.index(magic, 4) + 4)  # the frame after the header's
    data[second + 40: second + 60] = bytes(20)
    path.write_bytes(bytes(data))
    done = _console("replay", str(path), "--print")
    warned = _warnings(done.stderr)
    assert done.returncode == 1 and len(warned) == 1
    assert "compressed data is damaged" in warned[0]
    shown = done.stdout.splitlines()
    # the frames before and after the damaged one come out
    assert shown[1].endswith("| line 0 ") and "| line 29999 " in shown[-1]
    from console.report.page import render

    found: list[str] = []
    render(path, found)
    assert len(found) == 1 and "compressed data is damaged" in found[0]


def test_a_header_padded_to_5_mb_is_read(tmp_path: Path) -> None:
    path = tmp_path / "padded.jsonl"
    path.write_bytes(json.dumps({**HEADER, "pad": " " * 5_000_000}).encode() + b"\n" + BEFORE
                     + b"\n")
    done = _console("replay", str(path), "--print")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines()[-1].endswith("r1| before")


def test_the_report_draws_header_text_and_lists_a_host_once(tmp_path: Path) -> None:
    from console.report.page import render

    path = tmp_path / "esc.jsonl"
    header = {**HEADER, "hosts": ["bo\x1bx", "bo\x1bx", "a\x07b"], "console_version": "1\x1b[31m"}
    path.write_bytes(b"\n".join([json.dumps(header).encode(),
                                 _line("job.line", {"run_id": "r1", "name": "n", "text": "x",
                                                    "offset": 1}, host="bo\x1bx")]) + b"\n")
    page = render(path, [])
    assert "\x1b" not in page and "\x07" not in page
    assert page.count(visible("bo\x1bx")) == 2  # the hosts cell and its one heading
    assert page.count("Host ") == 1


# -- the fast --print paths against the per-event path ------------------------------------------


@pytest.mark.parametrize("block", [True, False], ids=["with-job.lines", "line-per-event"])
def test_fast_print_judges_every_row_as_the_per_event_path(tmp_path: Path, block: bool) -> None:
    """Each damaged row in a segment the fast paths take (a real run's, holding job.lines
    records; an older line-per-event one): the same bad records, the same lines."""
    from console.commands.replay import print_session

    path = tmp_path / "all.jsonl"
    good = [BEFORE, *([BLOCK] if block else []), AFTER]
    rows = [bad for _, bad, _ in SESSION_ROWS if len(bad) < 10_000]
    lines = [json.dumps(HEADER).encode()]
    for bad in rows:
        lines += [*good, bad]
    path.write_bytes(b"\n".join(lines) + b"\n")
    expected_bad, expected_out = [], []
    for i, line in enumerate(lines[1:]):
        try:
            events = decode_record(line)
        except BadLine:
            expected_bad.append(i)
            continue
        expected_out += [visible(t) for t in map(human_line, events) if t is not None]
    with SessionReader(path) as reader:
        out = io.BytesIO()
        bad = print_session(reader, out, as_json=False)  # type: ignore[arg-type]
    assert bad is not None and [i for i, _ in bad] == expected_bad
    assert len(expected_bad) == len(rows)
    assert out.getvalue().decode().splitlines() == expected_out


# -- job output: `@@eagle3` stage records on `jobs tail` ----------------------------------------

TAIL_ROWS = [
    ('{"type":"end","stage":"t","summary":"ab"}', "an end record's 'summary' is str"),
    ('{"type":"end","stage":"t","summary":5}', "an end record's 'summary' is int"),
    ('{"type":"end","stage":"t","seconds":"x"}', "at `$.seconds`"),
    ('{"type":"progress","stage":"t","done":"x"}', "at `$.done`"),
    ('{"type":"skipped","stage":"t","bytes":"x"}', "at `$.bytes`"),
    ('{"type":"progress","stage":"t","done":1,"host":"h","kind":"k"}', None),  # keys, no clash
    ("not json", "not a JSON object"),
]


@pytest.mark.parametrize(("record", "why"), TAIL_ROWS, ids=[r[0][:40] for r in TAIL_ROWS])
async def test_a_malformed_stage_record_is_one_warning_and_the_tail_goes_on(
        tmp_path: Path, record: str, why: str | None) -> None:
    script = f"print('before'); print('@@eagle3 ' + {record!r}); print('after')"
    t = LocalTransport()
    await t.connect()
    bus = EventBus()
    seen: list[ev.Event] = []
    bus.add_callback(seen.append)
    jobs = Jobs(t, str(tmp_path / "box"), host="local", bus=bus, python=sys.executable)
    try:
        info = await jobs.launch([sys.executable, "-c", script], name="t")
        for _ in range(2):  # a second tail of the same run (a reattach) must not crash either
            async with aclosing(jobs.tail(info.run_id)) as lines:
                texts = [line.text async for line in lines]
            assert texts[0] == "before" and texts[-1] == "after"
        exit_info = await jobs.wait(info.run_id)
    finally:
        await jobs.close()
        await t.close()
    assert exit_info.returncode == 0
    warned = [e for e in seen if e.kind == ev.CONSOLE_WARNING]
    if why is None:
        assert warned == [] and [e.kind for e in seen].count(ev.STAGE_PROGRESS) == 2
        return
    assert len(warned) == 2  # one per tail
    offset = len("before\n") + len("@@eagle3 " + record + "\n")
    assert why in warned[0].payload["message"]
    assert f"log line ending at byte {offset}" in warned[0].payload["message"]
    assert [e.payload["text"] for e in seen if e.kind == ev.JOB_LINE][-1] == "after"
    assert seen[-1].kind == ev.JOB_EXIT


def test_jobs_tail_on_the_local_host_shows_the_lines_after_a_bad_record(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(tmp_path / "s"),
           "XDG_DATA_HOME": str(tmp_path / "d"), "XDG_CONFIG_HOME": str(tmp_path / "c")}
    record = '@@eagle3 {"type":"end","stage":"t","summary":"ab"}'
    done = subprocess.run([sys.executable, "-m", "console", "jobs", "--host", "local",
                           "launch", "--name", "t", "--", "sh", "-c",
                           f"echo before; echo '{record}'; echo after"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert [ln.split("| ", 1)[1] for ln in out if "| " in ln] == ["before", "after"]
    assert sum("warning: t: malformed stage record skipped" in ln for ln in out) == 1
    assert "job.exit: t exited, returncode 0" in out[-1]
    assert "internal error" not in done.stderr


# -- bench results: a result file is read by its dataclasses' types ------------------------------

BENCH_ROWS = [
    ("output_tok_s", "x", "Expected `float`, got `str` - at `$.points[0].output_tok_s`"),
    ("acceptance", [1], "Expected `object | null`, got `array` - at `$.points[0].acceptance`"),
    ("acceptance", "x", "Expected `object | null`, got `str` - at `$.points[0].acceptance`"),
    ("errors", [5], "Expected `str`, got `int` - at `$.points[0].errors[0]`"),
]


@pytest.mark.parametrize(("field", "value", "why"), BENCH_ROWS,
                         ids=[f"{r[0]}={r[1]!r}" for r in BENCH_ROWS])
def test_a_malformed_bench_result_is_refused_in_one_line(tmp_path: Path, field: str,
                                                         value: object, why: str) -> None:
    from remote.bench.results import BenchRun, Point, load_result, save_result
    from remote.errors import UsageError

    point = Point(concurrency=1, requests=4, failed=0, output_tokens=64, duration=1.0,
                  output_tok_s=64.0, req_s=4.0, ttft_p50=None, ttft_p99=None, tpot_p50=None,
                  tpot_p99=None, acceptance={"rate": 0.5})
    run = BenchRun(label="a", url="u", model="m", speculative=True, max_tokens=16, rounds=1,
                   prompts="p", prompts_sha256="s", started=TS, points=[point])
    path = save_result(tmp_path / "r.json", run)
    assert load_result(path).run == run  # the good file reads back
    doc = json.loads(path.read_text())
    doc["run"]["points"][0][field] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError) as caught:
        load_result(path)
    assert str(caught.value) == f"bench result {path}: malformed run ({why})"
