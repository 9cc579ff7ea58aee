from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from console.sessions.reader import SessionReader
from console.sessions.replay import YIELD_EVERY, Replayer
from console.sessions.writer import SessionWriter
from remote.spine.bus import EventBus
from remote.spine.events import Event, utc_now


def _session(tmp_path: Path, gaps_ms: list[int]) -> Path:
    path = tmp_path / "s.jsonl"
    t = utc_now()
    with SessionWriter(path, ["box"]) as w:
        for i, gap in enumerate(gaps_ms):
            t += timedelta(milliseconds=gap)
            kind = "stage.start" if i in (3, 7) else "job.line"
            # the fields the kinds' schemas require (a record without them is damaged)
            w.write(Event(kind, "box", {"i": i, "stage": "s"} if kind == "stage.start"
                          else {"i": i, "text": f"line {i}"}, t))
    return path


@contextmanager
def _replaying(tmp_path: Path, gaps_ms: list[int], *, speed: float) -> Iterator[tuple[Replayer, list[int]]]:
    """A replayer of a session with these gaps onto a bus, and the `i` of each event it published."""
    with SessionReader(_session(tmp_path, gaps_ms)) as r:
        bus = EventBus()
        seen: list[int] = []
        bus.add_callback(lambda e: seen.append(e.payload["i"]))
        yield Replayer(r, bus, speed=speed), seen


async def test_max_speed_replays_everything_in_order(tmp_path: Path) -> None:
    with _replaying(tmp_path, [0] + [1000] * 9, speed=float("inf")) as (rp, seen):
        rp.play()
        await asyncio.wait_for(rp.run(), 5)
        assert seen == list(range(10)) and rp.finished


async def test_pause_step_seek_and_markers(tmp_path: Path) -> None:
    with _replaying(tmp_path, [0] + [10] * 9, speed=float("inf")) as (rp, seen):
        assert rp.paused
        task = asyncio.create_task(rp.run())
        await asyncio.sleep(0.05)
        assert seen == []  # paused: nothing published
        rp.step()
        rp.step()
        assert seen == [0, 1]
        assert rp.next_marker() == 3
        rp.seek_index(rp.next_marker() or 0)
        rp.step()
        assert seen == [0, 1, 3]
        assert rp.next_marker() == 7
        assert rp.previous_marker() is None  # nothing before the marker just shown
        rp.seek_index(rp.reader.index_at_time(rp.reader.time_of(8)))
        rp.play()
        await asyncio.wait_for(task, 5)
        assert seen == [0, 1, 3, 8, 9]


async def test_speed_paces_by_timestamps(tmp_path: Path) -> None:
    # 3 gaps of 200 ms at 10x: about 60 ms; at 1x it would be 600 ms. Assert only order and that
    # a slower speed leaves events unpublished when cancelled early (no wall-clock thresholds).
    with _replaying(tmp_path, [0, 200, 200, 200], speed=1.0) as (rp, seen):
        rp.play()
        task = asyncio.create_task(rp.run())
        await asyncio.sleep(0.01)
        assert seen == [0]  # the next event is 200 ms of replay time away
        rp.set_speed(float("inf"))
        await asyncio.wait_for(task, 5)
        assert seen == [0, 1, 2, 3]


async def test_records_due_at_once_leave_the_loop_free_between_slices(tmp_path: Path) -> None:
    """An old recording's second of log lines shares one timestamp: at 1x (and at max speed)
    the replayer publishes them with no wait between, and a key pressed meanwhile waited for
    all of them. Now the loop runs other tasks at least every YIELD_EVERY events."""
    n = 5 * YIELD_EVERY
    for k, speed in enumerate((1.0, float("inf"))):
        (tmp_path / str(k)).mkdir()
        with SessionReader(_session(tmp_path / str(k), [0] * n)) as r:
            bus = EventBus()
            published = [0]
            bus.add_callback(lambda e: published.__setitem__(0, published[0] + 1))  # noqa: B023
            rp = Replayer(r, bus, speed=speed)
            rp.play()
            seen_between: list[int] = []  # events published since the other task last ran
            last = [0]

            async def other_task() -> None:
                while True:
                    seen_between.append(published[0] - last[0])  # noqa: B023
                    last[0] = published[0]  # noqa: B023
                    await asyncio.sleep(0)

            other = asyncio.create_task(other_task())
            await asyncio.wait_for(rp.run(), 10)
            other.cancel()
            assert published[0] == n and rp.finished
            assert max(seen_between) <= YIELD_EVERY + 1, (speed, max(seen_between))
            assert sum(seen_between) >= n - YIELD_EVERY - 1  # it ran all along, not only at the end


# Lines that do not start with a valid timestamp (issue 48 row 4): the TUI's replay asked for
# their time outside step()'s damage handling and stalled there, saying nothing.
DAMAGED = [b"garbage", b"\xff\xfe not utf-8 \xc3", b"\x00" * 40,
           b'{"ts":"2026-13-45T10:00:00.000Z","host":"box","kind":"job.line",'
           b'"payload":{"i":99,"text":"month 13"}}']


async def test_a_line_without_a_valid_timestamp_is_reported_and_passed(tmp_path: Path) -> None:
    for k, speed in enumerate((1.0, 10.0, float("inf"))):
        (tmp_path / str(k)).mkdir()
        path = _session(tmp_path / str(k), [0, 20, 20, 20, 20, 20])
        lines = path.read_bytes().split(b"\n")
        # header, events 0-1, the damage, events 2-5 (3 is a marker)
        path.write_bytes(b"\n".join([*lines[:3], *DAMAGED, *lines[3:]]))
        with SessionReader(path) as r:
            bus = EventBus()
            seen: list[int] = []
            bus.add_callback(lambda e: seen.append(e.payload["i"]))  # noqa: B023
            rp = Replayer(r, bus, speed=speed)
            rp.play()
            await asyncio.wait_for(rp.run(), 10)
            assert seen == list(range(6)) and rp.finished, speed
            assert len(r.warnings) == len(DAMAGED), r.warnings
            assert all("\n" not in w for w in r.warnings)
