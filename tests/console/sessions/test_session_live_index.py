"""The recorder's live index (issue 17): a session whose recorder was killed opens from the
journal it kept, scanning only the tail, and reads exactly what a full scan reads; a torn,
stale or foreign journal is trusted only as far as the file agrees with it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from console.sessions import index as session_index
from console.sessions import writer as session_writer
from console.sessions import writer_index as session_writer_index
from console.sessions.index import index_path
from console.sessions.reader import SessionReader
from console.sessions.writer import SessionWriter
from remote.spine.events import Event

REPO = Path(__file__).resolve().parents[3]

# Small thresholds so that a few MB make many segments and rows; the same in the recorder
# subprocess and in this process (the reader's threshold decides whether it keeps an index).
_SMALL = textwrap.dedent(
    """
    from console.sessions import writer as session_writer, index as session_index, writer_index as session_writer_index
    session_index.MIN_BYTES = 256 << 10
    session_index.MIN_BYTES_COMPRESSED = 32 << 10
    session_writer_index.PLAIN_SEGMENT = 32 << 10
    session_writer.FRAME_EVENTS = 250
    """
)


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_index, "MIN_BYTES", 256 << 10)
    monkeypatch.setattr(session_index, "MIN_BYTES_COMPRESSED", 32 << 10)
    monkeypatch.setattr(session_writer_index, "PLAIN_SEGMENT", 32 << 10)
    monkeypatch.setattr(session_writer, "FRAME_EVENTS", 250)


def _event(i: int) -> Event:
    """Event number `i` of the recordings here: which one a line is can be read back."""
    if i % 97 == 5:
        return Event("marker", "box", {"label": f"m{i}", "i": i})
    if i % 31 == 0:
        return Event("stats.sample", "box", {"i": i, "host": {}, "gpus": [
            {"index": g, "util": (i + g) % 100} for g in range(8)]})
    return Event("job.line", "box", {"i": i, "text": f"step {i} loss {1 / (i + 1):.6f}"})


_RECORDER = _SMALL + textwrap.dedent(
    """
    import sys, time
    from console.sessions.writer import SessionWriter
    from console.sessions.index import index_path
    from tests.console.sessions.test_session_live_index import _event
    w = SessionWriter(sys.argv[1], ["box"])
    i, ready = 0, False
    while True:
        n = 1 + (i * 7) % 60  # batches of 1 to 60, as the bus hands them over
        if n == 1:
            w.write(_event(i))
        else:
            w.write_many([_event(k) for k in range(i, i + n)])
        i += n
        if not ready and i >= 10_000 and index_path(w.path).exists():
            print("ready", flush=True)
            ready = True
        if i >= 15_000:
            time.sleep(0.001)  # keeps writing, slower: the file stays a few MB
    """
)


def _view(r: SessionReader, every: int = 1) -> dict[str, Any]:
    """What a reader answers: events in order and by number, markers, seeks by time."""
    events = list(r.events())
    return {
        "len": len(r), "events": events, "markers": r.markers(),
        "by_index": [r.event(i) for i in range(0, len(r), every)],
        "at_time": [r.index_at_time(e.ts) for e in events[::every]],
        "warnings": r.warnings,
    }


def _full_scan(path: Path, tmp: Path, every: int = 1) -> dict[str, Any]:
    """The oracle: the same bytes opened with no index of any kind beside them."""
    copy = tmp / f"oracle-{path.name}"
    copy.unlink(missing_ok=True)
    shutil.copyfile(path, copy)
    with SessionReader(copy, write_index=False) as r:
        assert r.resumed_events == 0 and not r.index_reused
        view = _view(r, every)
    copy.unlink()
    return view


@pytest.mark.parametrize("name", ["day.jsonl", "day.jsonl.zst"])
def test_sigkill_of_a_recorder_mid_write_then_every_event_and_seek_match_a_full_scan(
    tmp_path: Path, small_segments: None, name: str
) -> None:
    path = tmp_path / name
    proc = subprocess.Popen([sys.executable, "-c", _RECORDER, str(path)], cwd=REPO,
                            stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3)  # still writing: the kill lands in the middle of the recording
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    journal = index_path(path).read_bytes()
    assert journal.startswith(b'{"format":"eagle3-console-session-live-index"')

    want = _full_scan(path, tmp_path)
    n = want["len"]
    assert n > 10_000
    # the recorder's own sequence, every event of it up to the last whole write
    assert [e.payload["i"] for e in want["events"]] == list(range(n))
    assert want["markers"] == [i for i in range(n) if i % 97 == 5]

    with SessionReader(path) as r:
        assert not r.index_reused
        # all but what the recorder was filling (for zstd that may be nothing yet on disk)
        assert 0.8 * n < r.resumed_events <= n
        got = _view(r)
    assert got == want
    # that open kept the complete index: the next one reads nothing but it
    assert not index_path(path).read_bytes().startswith(b'{"format":"eagle3-console-session-live')
    with SessionReader(path) as r:
        assert r.index_reused and r.resumed_events == 0
        assert _view(r, every=13) == _full_scan(path, tmp_path, every=13)


def _snapshot(name: str, tmp: Path, events: int) -> tuple[Path, bytes]:
    """A session as a killed recorder leaves it (the writer still open when it is copied),
    and its journal."""
    path = tmp / f"live-{name}"
    w = SessionWriter(path, ["box"])
    for k in range(0, events, 40):
        w.write_many([_event(i) for i in range(k, min(k + 40, events))])
    snap = tmp / name
    shutil.copyfile(path, snap)
    journal = index_path(path).read_bytes()
    w.close()
    return snap, journal


def _rows(journal: bytes) -> list[bytes]:
    return journal.split(b"\n")[1:-1]


def _opened(path: Path, journal: bytes, tmp: Path) -> int:
    """Events the journal vouched for; what was read must equal a full scan either way."""
    index_path(path).write_bytes(journal)
    with SessionReader(path, write_index=False) as r:
        resumed = r.resumed_events
        got = _view(r, every=11)
    assert got == _full_scan(path, tmp, every=11)
    return resumed


@pytest.mark.parametrize("name", ["s.jsonl", "s.jsonl.zst"])
def test_a_torn_stale_or_foreign_journal_is_trusted_only_as_far_as_the_file_agrees(
    tmp_path: Path, small_segments: None, name: str
) -> None:
    path, journal = _snapshot(name, tmp_path, 8000)
    rows = _rows(journal)
    assert len(rows) > 8
    whole = _opened(path, journal, tmp_path)
    assert 6000 < whole < 8000

    # torn mid-row (the recorder killed inside the append): the rows before it hold
    torn = journal[: len(journal) - len(rows[-1]) // 2 - 1]
    assert 0 < _opened(path, torn, tmp_path) < whole
    # a damaged byte in a middle row: that row and those after it are scanned instead
    k = len(rows) // 2
    at = journal.index(rows[k]) + 3
    flipped = journal[:at] + bytes([journal[at] ^ 0x01]) + journal[at + 1 :]
    partial = _opened(path, flipped, tmp_path)
    assert 0 < partial < whole
    # an empty or damaged first line: not a journal
    assert _opened(path, b"", tmp_path) == 0
    assert _opened(path, journal.replace(b"live-index", b"live-indey", 1), tmp_path) == 0
    assert _opened(path, journal.replace(b'"version":1', b'"version":2', 1), tmp_path) == 0

    # foreign: the journal of another recording (same shape, other start time)
    (tmp_path / "other").mkdir()
    _, other = _snapshot(name, tmp_path / "other", 8000)
    assert other != journal
    assert _opened(path, other, tmp_path) == 0

    # a row that is well formed (its own CRC right) but disagrees with the file: refused whole
    body = rows[k].rpartition(b"\t")[0]
    row = json.loads(body)
    row[8] ^= 1  # the CRC of its segment's last bytes
    fake = json.dumps(row, separators=(",", ":")).encode()
    lied = journal.replace(rows[k], fake + b"\t%08x" % zlib.crc32(fake))
    assert _opened(path, lied, tmp_path) == 0

    # stale: the session changed under its journal (a byte inside a covered segment's last
    # bytes, then the file cut short of what the rows cover)
    seg_end = json.loads(_rows(journal)[2].rpartition(b"\t")[0])[1]
    data = bytearray(path.read_bytes())
    data[seg_end - 10] ^= 0x01
    path.write_bytes(bytes(data))
    assert _opened(path, journal, tmp_path) == 0
    data[seg_end - 10] ^= 0x01
    path.write_bytes(bytes(data[: seg_end + 100]))
    assert _opened(path, journal, tmp_path) == 0


def test_a_journal_replaced_by_a_reader_is_rewritten_by_the_recorder(
    tmp_path: Path, small_segments: None
) -> None:
    """Opening a session that is still being recorded writes the complete index over the
    journal; the recorder notices at its next row and writes the journal anew, whole."""
    path = tmp_path / "s.jsonl"
    w = SessionWriter(path, ["box"])
    w.write_many([_event(i) for i in range(12_000)])
    w.write_many([_event(i) for i in range(12_000, 12_050)])  # publishes the closed segment
    with SessionReader(path) as r:
        assert r.resumed_events == 12_000  # one write: one segment, its row published
    assert not index_path(path).read_bytes().startswith(b'{"format":"eagle3-console-session-live')
    for k in range(12_050, 30_000, 50):
        w.write_many([_event(i) for i in range(k, k + 50)])
    snap = tmp_path / "snap.jsonl"
    shutil.copyfile(path, snap)
    index_path(snap).write_bytes(index_path(path).read_bytes())
    w.close()
    with SessionReader(snap, write_index=False) as r:
        assert 25_000 < r.resumed_events < 30_000
        assert [e.payload["i"] for e in r.events()] == list(range(30_000))


def test_a_small_session_gets_no_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """Below the size a reader would index (the default threshold), nothing is written beside
    the session, even while it records and closes segments."""
    monkeypatch.setattr(session_writer_index, "PLAIN_SEGMENT", 4096)
    path = tmp_path / "s.jsonl"
    w = SessionWriter(path, ["box"])
    w.write_many([_event(i) for i in range(5000)])
    w.write(_event(5000))
    assert not index_path(path).exists()
    w.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]


# The recorder killed (kill -9 of itself) inside its journal's first write: the journal's body
# half written aside, not yet renamed into place.
_KILLED_IN_FIRST_WRITE = _SMALL + textwrap.dedent(
    """
    import os, signal, sys
    from console.sessions import live_index as session_live_index
    from console.sessions.writer import SessionWriter
    from tests.console.sessions.test_session_live_index import _event

    def _write_half_then_die(fd, data):
        os.write(fd, data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)

    session_live_index._write_all = _write_half_then_die
    w = SessionWriter(sys.argv[1], ["box"])
    for k in range(0, 100_000, 40):
        w.write_many([_event(i) for i in range(k, k + 40)])
    """
)


def _killed_in_first_write(path: Path) -> Path:
    """Records `path` until the kill; returns the file the killed recorder left aside."""
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_IN_FIRST_WRITE, str(path)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.wait(timeout=120) == -signal.SIGKILL
    assert not index_path(path).exists()  # the rename never happened
    left = list(path.parent.glob(f".{path.name}.idx.*.live.tmp"))
    assert [p.name for p in left] == [f".{path.name}.idx.{proc.pid}.live.tmp"]
    assert left[0].stat().st_size > 0
    return left[0]


@pytest.mark.parametrize("name", ["day.jsonl", "day.jsonl.zst"])
def test_a_kill_during_the_journals_first_write_leaves_nothing_after_the_next_open(
    tmp_path: Path, small_segments: None, name: str
) -> None:
    path = tmp_path / name
    _killed_in_first_write(path)
    want = _full_scan(path, tmp_path)
    assert want["len"] > 1000
    assert [e.payload["i"] for e in want["events"]] == list(range(want["len"]))
    # a running recorder's file aside (its pid alive, the file new) is not touched
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running = tmp_path / f".{name}.idx.{live.pid}.live.tmp"
        running.write_bytes(b"being written")
        with SessionReader(path, write_index=False) as r:
            assert r.resumed_events == 0  # no journal was ever in place
            assert _view(r) == want
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, running.name])
    finally:
        live.kill()
        live.wait()


def test_a_kill_during_the_journals_first_write_is_cleared_by_the_next_recording(
    tmp_path: Path, small_segments: None
) -> None:
    """The next recording in the same directory clears it too, when its own journal starts
    (a session killed that way may never be opened)."""
    killed = tmp_path / "killed.jsonl"
    _killed_in_first_write(killed)
    path = tmp_path / "next.jsonl"
    w = SessionWriter(path, ["box"])
    for k in range(0, 12_000, 40):
        w.write_many([_event(i) for i in range(k, k + 40)])
    assert index_path(path).exists()  # its journal started
    w.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["killed.jsonl", "next.jsonl", "next.jsonl.idx"])
