from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import repeat

import pytest

from remote import bulk
from remote.bus import EventBus
from remote.events import JOB_LINE, Event, JobLines, format_ts, parse_ts, utc_now

# Text a log line can hold that JSON must escape: quotes, backslashes (also before an n, which
# must not read as a newline), control characters, DEL, non-ASCII in and beyond the BMP, the
# replacement character a bad UTF-8 byte decodes to, format characters, nothing at all.
AWKWARD = ['plain', 'say "hi"', 'C:\\new\\n', '\\n', 'tab\there', 'bell\x07 esc\x1b[0m', 'del\x7f',
           'caf\u00e9 \u2014 \u00fcber', 'emoji \U0001f680', 'bad \ufffd byte', '100% {x} %s %d', '',
           ' ', '}}', '"', '\\']


def test_event_json_round_trip_is_exact() -> None:
    e = Event("stage.progress", "kimi", {"stage": "train", "done": 3, "total": 10, "x": [1.5, None]})
    back = Event.from_json(e.to_json())
    assert back == e
    assert json.loads(e.to_json())["payload"]["x"] == [1.5, None]


def test_timestamp_is_utc_millisecond_and_fixed_width() -> None:
    ts = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    text = format_ts(ts)
    assert text == "2026-01-02T03:04:05.678Z"
    assert parse_ts(text) == ts.replace(microsecond=678000)
    assert utc_now().microsecond % 1000 == 0
    # the session index relies on ts being the first key at a fixed offset
    assert Event("x", ts=ts).to_json().startswith('{"ts":"2026-01-02T03:04:05.678Z",')


@pytest.mark.parametrize(
    "line",
    ['[1,2]', '{"kind":"x"}', '{"ts":"2026-01-02T03:04:05.678","kind":"x"}',
     '{"ts":"2026-01-02T03:04:05.678Z","kind":3}', "not json"],
)
def test_from_json_rejects_non_events(line: str) -> None:
    with pytest.raises(ValueError):
        Event.from_json(line)


def test_payload_must_be_serialisable() -> None:
    with pytest.raises(TypeError, match="not JSON serialisable"):
        Event("x", payload={"obj": object()}).to_json()


async def test_bus_fans_out_in_order_to_callbacks_and_subscribers() -> None:
    bus = EventBus()
    seen: list[str] = []
    remove = bus.add_callback(lambda e: seen.append(e.kind))
    all_sub = bus.subscribe()
    jobs_sub = bus.subscribe({"job"})
    for kind in ("job.started", "stats.sample", "job.line", "jobs.other"):
        bus.emit(kind, "h", n=1)
    remove()
    bus.emit("job.exit", "h")
    bus.close()
    assert seen == ["job.started", "stats.sample", "job.line", "jobs.other"]
    assert [e.kind async for e in all_sub] == [
        "job.started", "stats.sample", "job.line", "jobs.other", "job.exit"
    ]
    # prefix filtering matches whole dotted components only ("job" is not "jobs")
    assert [e.kind async for e in jobs_sub] == ["job.started", "job.line", "job.exit"]
    with pytest.raises(RuntimeError):
        bus.emit("late")


async def test_publish_many_reaches_every_kind_of_consumer_in_order() -> None:
    bus = EventBus()
    single: list[int] = []
    batches: list[list[int]] = []
    bus.add_callback(lambda e: single.append(e.payload["i"]))
    bus.add_batch_callback(lambda es: batches.append([e.payload["i"] for e in es]))
    sub = bus.subscribe({"job"})
    bus.publish_many([Event("job.line", "h", {"i": i}) for i in range(3)])
    bus.publish(Event("job.line", "h", {"i": 3}))
    bus.publish_many([])
    bus.close()
    assert single == [0, 1, 2, 3]
    assert batches == [[0, 1, 2], [3]]
    assert [e.payload["i"] async for e in sub] == [0, 1, 2, 3]


def test_job_lines_are_ordinary_events_encoded_byte_for_byte_as_each_one() -> None:
    ts = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    host, run_id, name = 'b\u00f6x "1"', "20260102-030405-ab%cd", 'na\\me "x" \u00e9'
    offsets = [10 * (i + 1) for i in range(len(AWKWARD))]
    batch = JobLines(host, run_id, name, AWKWARD, offsets, ts)
    expected = [Event(JOB_LINE, host, {"run_id": run_id, "name": name, "text": t, "offset": o}, ts)
                for t, o in zip(AWKWARD, offsets, strict=True)]
    assert list(batch) == expected and len(batch) == len(expected)
    assert batch[3] == expected[3] and batch[-1] == expected[-1]
    assert repr(batch[1]) == repr(expected[1])
    assert batch.to_jsonl() == "".join(e.to_json() + "\n" for e in expected)
    lines = batch.to_jsonl().splitlines()
    assert len(lines) == len(expected)
    for line, event in zip(lines, expected, strict=True):
        assert line.startswith('{"ts":"2026-01-02T03:04:05.678Z",')
        assert Event.from_json(line) == event
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch[0].kind = "x"  # type: ignore[misc]
    assert JobLines(host, run_id, name, [], []).to_jsonl() == ""
    with pytest.raises(ValueError, match="offsets"):
        JobLines(host, run_id, name, ["a", "b"], [1])


def test_bulk_build_fills_every_field_or_refuses() -> None:
    @dataclass(frozen=True, slots=True)
    class Pair:
        a: str
        b: int

    built = bulk.build(Pair, 3, {"a": repeat("x"), "b": [1, 2, 3]})
    assert built == [Pair("x", 1), Pair("x", 2), Pair("x", 3)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        built[0].a = "y"  # type: ignore[misc]
    with pytest.raises(TypeError, match="expected"):
        bulk.build(Pair, 1, {"a": ["x"]})
    with pytest.raises(ValueError, match="fewer than 3 values for b"):
        bulk.build(Pair, 3, {"a": repeat("x"), "b": [1, 2]})

    @dataclass(slots=True)
    class Mutable:
        a: str

    with pytest.raises(TypeError, match="frozen"):
        bulk.build(Mutable, 1, {"a": ["x"]})
