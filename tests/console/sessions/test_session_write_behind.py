"""The recorder's writes run on a thread of their own (console/sessions/write_behind.py): a stalled disk
must not stall whoever publishes, nothing may be lost or reordered, and a tail's cursor must not
get ahead of the lines the session holds.

A stalled disk is held here by a gate the writer thread waits on (the same as a write() blocked
by dirty-page throttling, from the publisher's side: the writer thread is busy and the queue
fills)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from console.sessions.reader import SessionReader
from console.sessions.recorder import Recorder
from console.sessions.write_behind import WriteBehind
from console.sessions.writer import SessionWriter
from remote.jobs.cursors import CursorStore
from remote.spine.bus import EventBus
from remote.spine.events import Event, JobLines


def _hold(rec: Recorder) -> tuple[threading.Event, threading.Event]:
    """Block the recorder's writer thread until the returned `release` is set."""
    held, release = threading.Event(), threading.Event()

    def wait() -> None:
        held.set()
        assert release.wait(30)

    rec.after_written(wait)
    assert held.wait(10)
    return held, release


def test_runs_work_in_order_and_drain_waits_for_it_to_finish() -> None:
    q = WriteBehind("t")
    done: list[int] = []
    for i in range(200):
        q.put(lambda i=i: done.append(i), 10)
    q.drain()
    assert done == list(range(200))
    q.close()
    with pytest.raises(RuntimeError, match="closed"):
        q.put(lambda: None)


def test_a_full_queue_makes_the_producer_wait_and_a_failing_item_does_not_stop_it() -> None:
    q = WriteBehind("t", max_bytes=100)
    release = threading.Event()
    done: list[str] = []
    q.put(lambda: (release.wait(30), done.append("slow"))[1], 60)
    q.put(lambda: done.append("second"), 40)  # fits: 100 in all
    blocked = threading.Thread(target=q.put, args=(lambda: done.append("third"), 10))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive()  # over the bound: waits for room
    release.set()
    blocked.join(10)
    assert not blocked.is_alive()

    def broken() -> None:
        raise ValueError("bug")

    q.put(broken)
    q.put(lambda: done.append("after"))
    q.close()  # runs what is queued, then stops
    assert done == ["slow", "second", "third", "after"]
    assert isinstance(q.failure, ValueError)


def test_publishing_does_not_wait_for_a_stalled_writer(tmp_path: Path) -> None:
    bus = EventBus()
    rec = Recorder(SessionWriter(tmp_path / "s.jsonl.zst", ["box"])).attach(bus)
    _, release = _hold(rec)
    for i in range(50):  # would block here if the recorder wrote on this thread
        bus.publish_many(JobLines("box", "r", "n", [f"line {i}.{k}" for k in range(10)],
                                  [i * 10 + k + 1 for k in range(10)]))
        bus.emit("console.info", "box", message=str(i))
    assert rec.writer.count == 0  # all of it waits behind the stall
    release.set()
    rec.close()
    with SessionReader(tmp_path / "s.jsonl.zst") as r:
        events = list(r.events())
    assert [e.payload["offset"] for e in events if e.kind == "job.line"] == list(range(1, 501))
    assert [e.payload["message"] for e in events if e.kind == "console.info"] == [
        str(i) for i in range(50)]
    assert [e.kind for e in events[:11]] == ["job.line"] * 10 + ["console.info"]


def test_a_cursor_is_saved_only_behind_the_lines_it_covers(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    bus = EventBus()
    rec = Recorder(SessionWriter(session, ["box"])).attach(bus)
    store = CursorStore(tmp_path / "cursors", session=session, after_recorded=rec.after_written)
    _, release = _hold(rec)
    bus.publish_many(JobLines("box", "run-1", "n", ["a", "b", "c"], [2, 4, 6]))
    store.save("box", "run-1", 6)
    assert not store.path("box", "run-1").exists()  # the lines are not in the session yet
    assert store.load("box", "run-1") == 6  # this process knows what it saved
    release.set()
    rec.sync()
    saved = json.loads(store.path("box", "run-1").read_text())
    assert saved["offset"] == 6
    assert saved["session_pos"] == session.stat().st_size  # taken after the lines were written
    assert '"job.lines"' in session.read_text()
    assert CursorStore(tmp_path / "cursors", session=session).load("box", "run-1") == 6
    rec.close()
    store.save("box", "run-1", 8)  # after close: saved at once
    assert json.loads(store.path("box", "run-1").read_text())["offset"] == 8


def test_a_failed_deferred_cursor_save_is_raised_by_the_next_save(tmp_path: Path) -> None:
    bus = EventBus()
    rec = Recorder(SessionWriter(tmp_path / "s.jsonl", ["box"])).attach(bus)
    blocker = tmp_path / "cursors"
    blocker.write_text("a file where the cursor directory should be")
    store = CursorStore(blocker, session=tmp_path / "s.jsonl", after_recorded=rec.after_written)
    store.save("box", "run-1", 3)
    rec.sync()
    with pytest.raises(OSError):
        store.save("box", "run-1", 4)
    rec.close()


def test_close_writes_everything_queued(tmp_path: Path) -> None:
    bus = EventBus()
    rec = Recorder(SessionWriter(tmp_path / "s.jsonl", ["box"])).attach(bus)
    _, release = _hold(rec)
    bus.publish_many([Event("job.line", "box", {"i": i, "text": ""}) for i in range(1000)])
    threading.Timer(0.2, release.set).start()
    rec.close()  # waits for the stall to end, then for every queued write
    assert rec.error is None and rec.writer.count == 1000
    with SessionReader(tmp_path / "s.jsonl") as r:
        assert [e.payload["i"] for e in r.events()] == list(range(1000))
