from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from remote.bus import EventBus
from remote.events import Event, format_ts, parse_ts, utc_now


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
