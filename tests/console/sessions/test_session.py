from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest

from console.errors import BadLine, SessionFormatError, SessionPathError, SessionWriteError
from console.sessions import writer as session_writer
from console.sessions.decode import decode_event, event_kinds
from console.sessions.reader import SessionReader
from console.sessions.recorder import Recorder
from console.sessions.writer import SessionWriter
from remote.spine.bus import EventBus
from remote.spine.events import JOB_LINE, Event, JobLines, utc_now
from tests.tmpfs import small_tmpfs

REPO = Path(__file__).resolve().parents[3]


def _events(n: int) -> list[Event]:
    t0 = utc_now()
    kinds = ["job.line", "stage.start", "stats.sample", "marker"]
    # with the fields each kind's schema requires: a record without them is damaged
    required: dict[str, dict[str, object]] = {"stage.start": {"stage": "s"},
                                              "stats.sample": {"host": {}}}
    return [
        Event(kinds[i % 4], "box", {"i": i, "text": f"line {i}", **required.get(kinds[i % 4], {})},
              t0 + timedelta(milliseconds=10 * i))
        for i in range(n)
    ]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
def test_write_then_read_back_everything(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"s{suffix}"
    evs = _events(50)
    with SessionWriter(path, ["box"]) as w:
        for e in evs:
            w.write(e)
    with SessionReader(path) as r:
        assert r.header.hosts == ["box"]
        assert len(r) == 50
        assert list(r.events()) == evs
        assert r.event(17) == evs[17]
        assert r.event(-1) == evs[-1]
        assert r.warnings == []
    if suffix.endswith(".zst"):
        assert path.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"


def test_writer_never_clobbers_an_existing_session(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    SessionWriter(path).close()
    before = path.read_bytes()
    with pytest.raises(SessionPathError, match="already exists") as info:
        SessionWriter(path)
    assert info.value.exit_code == 2
    assert path.read_bytes() == before


def test_seek_by_time_and_markers(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    evs = _events(1000)
    with SessionWriter(path) as w:
        for e in evs:
            w.write(e)
    with SessionReader(path) as r:
        assert r.index_at_time(evs[0].ts - timedelta(seconds=1)) == 0
        assert r.index_at_time(evs[500].ts) == 500
        assert r.index_at_time(evs[500].ts + timedelta(milliseconds=5)) == 501
        assert r.index_at_time(evs[-1].ts + timedelta(seconds=1)) == 1000
        markers = r.markers()
        assert markers == [i for i, e in enumerate(evs) if e.kind in ("stage.start", "marker")]


def test_nested_kind_in_payload_is_not_a_marker(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with SessionWriter(path) as w:
        w.write(Event("probe.result", "h", {"probe": "p", "inner": {"kind": "marker"}}))
        w.write(Event("marker", "h", {"label": "here"}))
    with SessionReader(path) as r:
        assert r.markers() == [1]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
def test_a_marker_whose_payload_breaks_its_schema_is_no_marker(tmp_path: Path,
                                                               suffix: str) -> None:
    """The markers found at open are judged as every reader judges a line (decode_event): a
    stage.start whose stage is a number is a corrupt record, not a place to seek to."""
    path = tmp_path / f"s{suffix}"
    with SessionWriter(path) as w:
        w.write(Event("stage.start", "h", {"stage": 5}))  # schema: stage is a string
        w.write(Event("stage.start", "h", {"stage": "train"}))
        w.write(Event("marker", "h", {"label": "here"}))
        w.write(Event("stage.end", "h", {"stage": "train", "ok": "yes"}))  # ok: a bool
    with SessionReader(path) as r:
        assert r.markers() == [1, 2]
        assert [e.payload for e in r.events()] == [{"stage": "train"}, {"label": "here"}]


def test_event_kinds_judges_a_batch_as_decode_event_judges_each_line() -> None:
    """The batch path of marker finding against the per-line reader, on hostile lines: each
    mixed with good ones, so a bad line cannot hide behind the fallback of its batch."""
    ts = '"ts":"2026-12-02T10:00:00.000Z"'
    good = [f'{{{ts},"kind":"marker","payload":{{"label":"a"}}}}',
            f'{{{ts},"kind":"stage.start","payload":{{"stage":"train"}}}}',
            f'{{{ts},"kind":"probe.result","payload":{{"probe":"p","x":{{"kind":"marker"}}}}}}',
            f'{{{ts},"kind":"a.kind.of.tomorrow","payload":{{"any":1}}}}']
    hostile = [f'{{{ts},"kind":"stage.start","payload":{{"stage":5}}}}',
               f'{{{ts},"kind":"stage.start","payload":null}}',
               f'{{{ts},"kind":"stage.start","payload":[]}}',
               f'{{{ts},"kind":"marker","payload":[]}}',
               f'{{{ts},"kind":"stage.end","payload":{{"stage":"t","ok":"yes"}}}}',
               f'{{{ts},"kind":"marker","payload":{{"label":"\xff"}}}}',
               '{"ts":"yesterday","kind":"marker","payload":{}}',
               f'{{{ts},"kind":"marker","payload":{{}}}} {{{ts},"kind":"marker"}}',
               f'[{{{ts},"kind":"marker"}}]',
               f'{{{ts},"kind":"job.exit","payload":{{"run_id":7}}}}']
    for bad in hostile:
        lines = [g.encode("latin-1") for g in good[:2]] + [bad.encode("latin-1")] + [
            g.encode() for g in good[2:]]
        want = []
        for line in lines:
            try:
                want.append(decode_event(line).kind)
            except BadLine:
                want.append(None)
        assert event_kinds(lines) == want, bad
        # each is a bad line, but a marker's falsy payload, which reads as `{}`
        assert want[2] == ("marker" if '"marker","payload":[]' in bad else None), bad


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
def test_torn_last_line_keeps_every_complete_event(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A compressed session's unit of loss is the block being written; flushing one per event
    # here makes that block the last event's, as in the plain file.
    monkeypatch.setattr(session_writer, "FLUSH_S", 0.0)
    path = tmp_path / f"s{suffix}"
    evs = _events(20)
    with SessionWriter(path) as w:
        for e in evs:
            w.write(e)
    data = path.read_bytes()
    # cut into the last event's line (plain) or into its zstd block, past the 3-byte end block
    cut = 40 if suffix == ".jsonl" else 12
    path.write_bytes(data[: len(data) - cut])
    with SessionReader(path) as r:
        got = list(r.events())
        assert got == evs[:19]
        assert len(r.warnings) == 1


def test_random_binary_and_other_json_are_rejected_clearly(tmp_path: Path) -> None:
    rnd = tmp_path / "random.bin"
    rnd.write_bytes(os.urandom(4096))
    with pytest.raises(SessionFormatError, match="not a console session file"):
        SessionReader(rnd)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"hello": 1}) + "\n")
    with pytest.raises(SessionFormatError, match="not a console session file"):
        SessionReader(other)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(SessionFormatError, match="empty"):
        SessionReader(empty)
    with pytest.raises(SessionFormatError, match="cannot open"):
        SessionReader(tmp_path / "missing.jsonl")
    fake_zst = tmp_path / "fake.jsonl.zst"
    fake_zst.write_bytes(b"\x28\xb5\x2f\xfd" + os.urandom(64))
    with pytest.raises(SessionFormatError):
        SessionReader(fake_zst)


def test_future_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "v9.jsonl"
    path.write_text(json.dumps({"format": "eagle3-console-session", "version": 9}) + "\n")
    with pytest.raises(SessionFormatError, match="version 9"):
        SessionReader(path)


_RECORDER = textwrap.dedent(
    """
    import sys, time
    from console.sessions.writer import SessionWriter
    from remote.spine.events import Event
    w = SessionWriter(sys.argv[1], ["box"], compress=sys.argv[1].endswith(".zst"))
    i = 0
    while True:
        w.write(Event("job.line", "box", {"i": i, "text": "x" * (i % 300)}))
        i += 1
        if i == 200:
            print("ready", flush=True)
    """
)


def _record_then_sigkill(script: str, path: Path) -> None:
    """Run a recording script in a real process, SIGKILL it mid-write once it is under way."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], cwd=REPO, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


_BATCH_RECORDER = textwrap.dedent(
    """
    import sys
    from console.sessions.recorder import Recorder
    from console.sessions.writer import SessionWriter
    from remote.spine.bus import EventBus
    from remote.spine.events import JobLines
    bus = EventBus()
    rec = Recorder(SessionWriter(sys.argv[1], ["box"])).attach(bus)
    offset = 0
    batches = 0
    while True:
        texts = [f"{offset + i} " + "x" * (i % 300) for i in range(500)]
        ends = [offset + i + 1 for i in range(500)]
        bus.publish_many(JobLines("box", "run-1", "big", texts, ends))
        offset += 500
        batches += 1
        if batches == 20:
            rec.sync()  # the first 20 blocks are written, not only queued
            print("ready", flush=True)
    """
)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
@pytest.mark.parametrize(("script", "field", "least", "first"), [
    # events one by one: at most the event being written is lost
    pytest.param(_RECORDER, "i", 200, 0, id="events"),
    # log blocks: every synced block is kept, and no line of them is reported corrupt
    pytest.param(_BATCH_RECORDER, "offset", 20 * 500, 1, id="log-blocks"),
])
def test_sigkill_while_recording_keeps_every_complete_record_in_order(
    tmp_path: Path, suffix: str, script: str, field: str, least: int, first: int
) -> None:
    path = tmp_path / f"killed{suffix}"
    _record_then_sigkill(script, path)
    with SessionReader(path) as r:
        got = [e.payload[field] for e in r.events()]
        if script is _BATCH_RECORDER:
            assert not [w for w in r.warnings if "corrupt" in w]
    assert len(got) >= least
    assert got == list(range(first, first + len(got)))  # every complete record, in order, no gaps


def test_a_log_block_is_one_record_read_back_as_the_same_events(tmp_path: Path) -> None:
    ts = utc_now()
    texts = ["plain", 'q "x" \\n', "caf\u00e9 \U0001f680", "", "ctl \x00\x1f\x7f"]
    ends = [6, 20, 33, 34, 45]
    one = SessionWriter(tmp_path / "one.jsonl", ["box"], started=ts)
    for text, end in zip(texts, ends, strict=True):
        one.write(Event(JOB_LINE, "box", {"run_id": "r", "name": "n", "text": text, "offset": end},
                        ts))
    one.close()
    bus = EventBus()
    rec = Recorder(SessionWriter(tmp_path / "batch.jsonl", ["box"], started=ts)).attach(bus)
    bus.publish_many(JobLines("box", "r", "n", texts, ends, ts))
    rec.close()
    assert rec.writer.count == len(texts)
    records = (tmp_path / "batch.jsonl").read_text().splitlines()[1:]
    assert len(records) == 1 and json.loads(records[0])["kind"] == "job.lines"
    with SessionReader(tmp_path / "batch.jsonl") as r, \
            SessionReader(tmp_path / "one.jsonl") as single:
        assert len(r) == 1 and len(single) == len(texts)  # positions count records
        assert list(r.events()) == list(single.events())
        assert list(r.record(0)) == list(single.events())
        assert r.event(0) == single.event(0)  # a block's position is its first line
        assert r.ts_at(0) == single.ts_at(len(texts) - 1)


def test_log_block_records_are_capped_and_a_single_line_stays_a_job_line(
        tmp_path: Path) -> None:
    """A record holds at most RECORD_LINES lines and about RECORD_CHARS of text: a huge block
    is split (in order, nothing lost); a one-line block has nothing to share."""
    from remote.spine.events import RECORD_CHARS, RECORD_LINES

    ts = utc_now()
    many = [f"l{i}" for i in range(2 * RECORD_LINES + 7)]
    wide = ["w" * (RECORD_CHARS // 3)] * 7
    blocks = [many, wide, ["alone"]]
    path = tmp_path / "s.jsonl"
    with SessionWriter(path, ["box"]) as w:
        for texts in blocks:
            w.write_many(JobLines("box", "r", "n", texts, list(range(len(texts))), ts))
    records = [json.loads(ln) for ln in path.read_text().splitlines()[1:]]
    assert [(r["kind"], len(r["payload"].get("texts", [0]))) for r in records] == [
        ("job.lines", RECORD_LINES), ("job.lines", RECORD_LINES), ("job.lines", 7),
        ("job.lines", 3), ("job.lines", 3), ("job.lines", 1), ("job.line", 1)]
    with SessionReader(path) as r:
        got = [(e.payload["text"], e.payload["offset"]) for e in r.events()]
    assert got == [(t, o) for texts in blocks for o, t in enumerate(texts)]


def test_disk_full_is_a_clear_error_and_recording_stops_cleanly(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "64k") as mnt:
        bus = EventBus()
        rec = Recorder(SessionWriter(mnt / "s.jsonl", ["box"])).attach(bus)
        for i in range(2000):
            bus.emit("job.line", "box", text="y" * 100, i=i)  # ~250 KB: more than fits
        rec.sync()
        assert rec.error is not None and "disk full" in rec.error
        written = rec.writer.count
        rec.close()
        with SessionReader(mnt / "s.jsonl") as r:
            got = [e.payload["i"] for e in r.events()]
        assert 0 < len(got) <= written
        assert got == list(range(len(got)))
        with pytest.raises(SessionWriteError, match="disk full"):
            w = SessionWriter(mnt / "s2.jsonl")
            while True:
                w.write(Event("x", payload={"pad": "z" * 1000}))


def test_recorder_writes_batches_whole_and_in_order(tmp_path: Path) -> None:
    bus = EventBus()
    rec = Recorder(SessionWriter(tmp_path / "s.jsonl.zst", ["box"])).attach(bus)
    bus.publish_many([Event("job.line", "box", {"i": i, "text": ""}) for i in range(100)])
    bus.emit("job.exit", "box", run_id="r", i=100)
    rec.close()
    with SessionReader(tmp_path / "s.jsonl.zst") as r:
        assert [e.payload["i"] for e in r.events()] == list(range(101))


def test_a_recorded_log_block_moves_the_tail_cursor(tmp_path: Path) -> None:
    """A tail resumes after the last line the session recorded, a block record's too (its
    offsets array), so a console killed between recording and saving its cursor neither
    repeats nor loses a line."""
    from remote.jobs.cursors import CursorStore

    session = tmp_path / "s.jsonl"
    bus = EventBus()
    rec = Recorder(SessionWriter(session, ["box"])).attach(bus)
    store = CursorStore(tmp_path / "cursors", session=session)
    store.save("box", "run-1", 10)
    bus.publish_many(JobLines("box", "run-1", "n", ["a", "b", "c"], [12, 14, 16]))
    bus.publish_many(JobLines("box", "run-2", "n", ["x", "y"], [90, 99]))
    bus.publish_many(JobLines("other", "run-1", "n", ["x", "y"], [90, 99]))
    rec.close()
    assert '"job.lines"' in session.read_text()
    assert store.load("box", "run-1") == 16
