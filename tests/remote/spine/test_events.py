from __future__ import annotations

import json
from datetime import UTC, datetime

import msgspec
import pytest

from remote.errors import PayloadError
from remote.spine import event_types as et
from remote.spine import op_types as ot
from remote.spine.bus import EventBus
from remote.spine.events import JOB_LINE, Event, JobLines, format_ts, parse_ts, utc_now

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


def test_bus_fans_out_in_order_to_callbacks() -> None:
    bus = EventBus()
    seen: list[str] = []
    remove = bus.add_callback(lambda e: seen.append(e.kind))
    bus.emit("job.started", "h", run_id="r", name="n")
    bus.post(et.StatsSample(host=ot.HostSample(cpu=1.0)), "h")
    bus.emit("job.line", "h", run_id="r", text="t", offset=1)
    bus.emit("jobs.other", "h", n=1)
    remove()
    bus.emit("job.exit", "h", run_id="r")
    bus.close()
    assert seen == ["job.started", "stats.sample", "job.line", "jobs.other"]
    with pytest.raises(RuntimeError):
        bus.emit("late")


def test_publish_many_reaches_every_kind_of_consumer_in_order() -> None:
    bus = EventBus()
    single: list[int] = []
    batches: list[list[int]] = []
    bus.add_callback(lambda e: single.append(e.payload["i"]))
    bus.add_batch_callback(lambda es: batches.append([e.payload["i"] for e in es]))
    bus.publish_many([Event("job.line", "h", {"i": i}) for i in range(3)])
    bus.publish(Event("job.line", "h", {"i": 3}))
    bus.publish_many([])
    bus.close()
    assert single == [0, 1, 2, 3]
    assert batches == [[0, 1, 2], [3]]


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
    with pytest.raises(AttributeError):
        batch[0].kind = "x"  # type: ignore[misc]
    assert JobLines(host, run_id, name, [], []).to_jsonl() == ""
    with pytest.raises(ValueError, match="offsets"):
        JobLines(host, run_id, name, ["a", "b"], [1])


def test_emit_checks_fields_against_the_kind_schema() -> None:
    bus = EventBus()
    with pytest.raises(PayloadError, match=r"job\.exit.*run_id"):
        bus.emit("job.exit", "h", state="exited")  # the run it ended is required
    with pytest.raises(PayloadError, match=r"stage\.progress"):
        bus.emit("stage.progress", "h", stage="train", done="many")
    # a kind without a schema (a producer on another branch) passes as it is
    assert bus.emit("other.kind", "h", url="http://x").payload == {"url": "http://x"}
    # extra fields are kept in the payload (a stage's own numbers), ignored by the typed view
    e = bus.emit("stage.progress", "h", stage="train", done=3, total=10, loss=0.5)
    assert e.payload["loss"] == 0.5
    data = e.data()
    assert isinstance(data, et.StageProgress) and (data.done, data.total) == (3, 10)


def test_typed_producers_and_old_payloads_meet_in_the_same_view() -> None:
    e = Event.of(et.JobExit(run_id="r1", name="train", state="exited", returncode=0), "box")
    assert e.kind == "job.exit" and e.payload == {"run_id": "r1", "name": "train",
                                                  "state": "exited", "returncode": 0}
    back = Event.from_json(e.to_json())
    assert back.data() == et.JobExit(run_id="r1", name="train", state="exited", returncode=0)
    # a damaged or pre-schema record gives no typed view (reducers skip it), but still replays
    old = Event.from_json('{"ts":"2026-01-02T03:04:05.678Z","host":"b","kind":"job.exit",'
                          '"payload":{"state":7}}')
    assert old.payload == {"state": 7} and old.data() is None
    # a line without host (an older writer) takes the generic path
    older = Event.from_json('{"ts":"2026-01-02T03:04:05.678Z","kind":"marker","payload":{}}')
    assert older.host == "" and older.data() == et.Marker()
    # NaN: json accepts it, msgspec does not; the generic path keeps such lines readable
    nan = Event.from_json('{"ts":"2026-01-02T03:04:05.678Z","host":"b","kind":"x",'
                          '"payload":{"v":NaN}}')
    assert nan.payload["v"] != nan.payload["v"]


def test_every_schema_is_registered_under_its_kind() -> None:
    assert all(kind == cls.KIND for kind, cls in et.SCHEMAS.items())
    subclasses = {c for c in _all_subclasses(et.Payload) if c.KIND}
    assert subclasses == set(et.SCHEMAS.values())


def _all_subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _all_subclasses(sub)
    return out


def test_a_stats_sample_without_text_is_small() -> None:
    """Issue 17: a host sample and an 8-GPU sample stay small; constant text is not repeated."""
    host = Event.of(et.StatsSample(source="none", host=ot.HostSample(
        cpu=12.5, mem_used=3 * 2**30, mem_total=16 * 2**30, load1=0.5), seq=7, interval=1.0),
        "box")
    gpu = {"util": 97.0, "mem_used": 70 * 2**30, "mem_total": 80 * 2**30, "power": 650.0,
           "power_limit": 700.0, "temp": 71.0, "sm_clock": 1980, "pcie_tx": 1.5e9,
           "pcie_rx": 2.5e9}
    eight = Event.of(et.StatsSample(source="nvml", host=host.data().host,  # type: ignore[union-attr]
                                    gpus=[ot.GpuSample(index=i, name="NVIDIA H200", **gpu)
                                          for i in range(8)], seq=8, interval=1.0), "box")
    for e in (host, eight):
        assert not {"summary", "print", "reason"} & set(e.payload)
        assert msgspec.json.decode(e.to_json())["payload"] == e.payload
    assert len(host.to_json()) < 250, host.to_json()
    assert len(eight.to_json()) < 8 * 260, len(eight.to_json())


def test_a_gpu_process_whose_name_the_box_cannot_read_keeps_its_sample() -> None:
    """Inside a container NVML names host pids whose /proc entry the box cannot see: the
    sampler sends `"name": null`; the typed view keeps the sample (it read as None before)."""
    payload = {"source": "nvml", "seq": 1, "interval": 0.1, "host": {"cpu": 3.0},
               "gpus": [{"index": 0, "name": "NVIDIA H200", "util": 50.0,
                         "procs": [{"pid": 4242, "name": None, "mem_used": 1024}]}]}
    data = Event(kind="stats.sample", host="box", payload=payload).data()
    assert isinstance(data, et.StatsSample)
    assert data.gpus[0].procs[0].pid == 4242 and data.gpus[0].procs[0].name is None
