"""Stage records become stage events where job lines are produced: a live tail, a reattached
tail and a replay of the recorded session give the same stage progress."""

from __future__ import annotations

import sys
from contextlib import aclosing
from pathlib import Path

from console.sessions.reader import SessionReader
from console.sessions.recorder import Recorder
from console.sessions.writer import SessionWriter
from remote.jobs.client import Jobs
from remote.link.transport import LocalTransport
from remote.spine import events as ev
from remote.spine.bus import EventBus

# A stage as pipeline/progress.py writes it, with ordinary log lines in between.
STAGE = (
    "import sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from pipeline import progress\n"
    "progress.emit('start', 'train', reason='forced')\n"
    "print('loading model', flush=True)\n"
    "for i in range(1, 4):\n"
    "    progress.emit('progress', 'train', done=i, total=3, unit='steps', loss=1.0 / i)\n"
    "    print(f'step {i}', flush=True)\n"
    "progress.emit('end', 'train', ok=True, seconds=1.5, summary={'loss': 0.33})\n"
)
ROOT = str(Path(__file__).resolve().parents[3])
STAGE_KINDS = (ev.STAGE_START, ev.STAGE_PROGRESS, ev.STAGE_END)


def stage_view(events: list[ev.Event]) -> list[tuple[str, object]]:
    return [(e.kind, e.payload.get("done")) for e in events if e.kind in STAGE_KINDS]


async def tail_once(jobs: Jobs, run_id: str, bus: EventBus) -> list[ev.Event]:
    seen: list[ev.Event] = []
    remove = bus.add_callback(seen.append)
    async with aclosing(jobs.tail(run_id)) as lines:
        async for _ in lines:
            pass
    remove()
    return seen


async def test_live_reattached_and_replayed_tails_show_the_same_stage_progress(
        tmp_path: Path) -> None:
    t = LocalTransport()
    await t.connect()
    bus = EventBus()
    session = tmp_path / "s.jsonl"
    recorder = Recorder(SessionWriter(session, ["local"])).attach(bus)
    jobs = Jobs(t, str(tmp_path / "box"), host="local", bus=bus, python=sys.executable)
    try:
        info = await jobs.launch([sys.executable, "-c", STAGE, ROOT], name="pipeline-train")
        live = await tail_once(jobs, info.run_id, bus)
        await jobs.close()
        # a fresh console reattaching to the finished job (console jobs tail / the TUI)
        other = Jobs(t, str(tmp_path / "box"), host="local", bus=bus, python=sys.executable)
        reattached = await tail_once(other, info.run_id, bus)
        await other.close()
    finally:
        recorder.close()
        await t.close()
    expected = [(ev.STAGE_START, None), (ev.STAGE_PROGRESS, 1), (ev.STAGE_PROGRESS, 2),
                (ev.STAGE_PROGRESS, 3), (ev.STAGE_END, None)]
    assert stage_view(live) == expected
    assert stage_view(reattached) == expected
    with SessionReader(session) as reader:
        replayed = list(reader.events())
    assert stage_view(replayed) == expected * 2
    # each stage event follows its own record line, and carries the stage's extra numbers
    kinds = [e.kind for e in live if e.kind in (ev.JOB_LINE, *STAGE_KINDS)]
    assert kinds[:4] == [ev.JOB_LINE, ev.STAGE_START, ev.JOB_LINE, ev.JOB_LINE]
    progress = [e for e in live if e.kind == ev.STAGE_PROGRESS]
    assert progress[0].payload["loss"] == 1.0 and progress[0].payload["unit"] == "steps"
    end = next(e for e in live if e.kind == ev.STAGE_END)
    assert end.payload["result"] == {"loss": 0.33} and end.payload["run_id"] == info.run_id
    start = next(e for e in live if e.kind == ev.STAGE_START)
    assert start.payload["stage"] == "train" and start.payload["reason"] == "forced"


def test_the_box_runners_records_become_skipped_failed_and_not_run_events() -> None:
    """The records only the box runner writes (pipeline/sequence.py): a skip with its
    manifest's facts, a stage that exited non-zero, the stages it did not reach."""
    from remote.jobs.stage_records import parse_record, stage_event

    def event(line: str) -> tuple[str, dict[str, object]] | None:
        rec = parse_record(line)
        assert rec is not None
        return stage_event(rec, "run-9", "pipeline")

    skipped = event('@@eagle3 {"type":"skipped","stage":"train","reason":"manifest matches (2 '
                    'outputs)","seconds":28.5,"bytes":3460000,"outputs":51,'
                    '"completed":"2026-12-04T18:42:41Z"}')
    assert skipped is not None and skipped[0] == ev.STAGE_SKIPPED
    assert skipped[1]["bytes"] == 3460000 and skipped[1]["completed"] == "2026-12-04T18:42:41Z"
    assert skipped[1]["summary"] == ("train skipped: up to date (finished 2026-12-04T18:42:41Z,"
                                     " took 28.5 s, 3.3 MiB in 51 outputs)")
    failed = event('@@eagle3 {"type":"end","stage":"vocab","ok":false,"seconds":2,'
                   '"returncode":1,"error":"vocab exited 1"}')
    assert failed is not None and failed[0] == ev.STAGE_END
    assert failed[1]["ok"] is False and failed[1]["error"] == "vocab exited 1"
    assert failed[1]["summary"] == "vocab failed: vocab exited 1"
    not_run = event('@@eagle3 {"type":"not_run","stage":"evaluate","reason":"vocab failed"}')
    assert not_run == (ev.STAGE_NOT_RUN, {"stage": "evaluate", "reason": "vocab failed",
                                          "run_id": "run-9",
                                          "summary": "evaluate not run: vocab failed"})
    assert event('@@eagle3 {"type":"finished","stage":"pipeline","ok":true}') is None
    for kind, payload in (skipped, failed, not_run):
        ev.Event(kind, "h", payload)
        assert ev.validate(kind, payload) is not None  # each payload is its kind's schema


# Records a buggy or hostile job can print (issue 48 row 3): a 401-digit byte count, infinite and
# NaN seconds (Python's json reads 1e400 and NaN), 50,000 nested lists.
HOSTILE = [
    '@@eagle3 {"type":"skipped","stage":"vocab","reason":"r","bytes":1' + "0" * 400
    + ',"outputs":1}',
    '@@eagle3 {"type":"skipped","stage":"prepare","reason":"r","seconds":1e400,"bytes":-5}',
    '@@eagle3 {"type":"skipped","stage":"extract","reason":"r","seconds":NaN,"bytes":2048,'
    '"outputs":2}',
    "@@eagle3 " + "[" * 50_000,
    '@@eagle3 {"type":"progress","stage":"train","done":' + "9" * 5000 + ',"total":3}',
]


def test_hostile_records_are_a_warning_or_an_event_never_a_crash() -> None:
    from remote.jobs.stage_records import record_event

    got = [record_event(line, "run-1", "pipeline", 10 * i) for i, line in enumerate(HOSTILE)]
    assert all(g is not None for g in got)
    vocab, prepare, extract, nested, _ = got
    assert vocab == (ev.STAGE_SKIPPED, {"stage": "vocab", "reason": "r", "outputs": 1,
                                        "summary": "vocab skipped: up to date"})
    assert prepare == (ev.STAGE_SKIPPED, {"stage": "prepare", "reason": "r",
                                          "summary": "prepare skipped: r"})
    assert extract is not None and extract[1]["summary"] == \
        "extract skipped: up to date (2.0 KiB in 2 outputs)"
    assert nested is not None and nested[0] == ev.CONSOLE_WARNING
    message = nested[1]["message"]
    assert message.startswith("pipeline: malformed stage record skipped (log line ending at "
                              "byte 30): ") and "\n" not in message and len(message) < 500


async def test_one_hostile_line_never_ends_a_tail(tmp_path: Path) -> None:
    """The job's later lines and its exit are reached, live and on every later tail (the cursor
    used to resume at the crashing byte and crash again)."""
    script = ("import sys\n"
              "for line in sys.argv[1:]:\n"
              "    print(line, flush=True)\n"
              "print('after', flush=True)\n"
              "sys.exit(3)\n")
    t = LocalTransport()
    await t.connect()
    bus = EventBus()
    jobs = Jobs(t, str(tmp_path / "box"), host="local", bus=bus, python=sys.executable)
    try:
        info = await jobs.launch([sys.executable, "-c", script, *HOSTILE], name="pipeline")
        tails = [await tail_once(jobs, info.run_id, bus) for _ in range(2)]
        assert (await jobs.wait(info.run_id)).returncode == 3
    finally:
        await jobs.close()
        await t.close()
    for seen in tails:
        texts = [e.payload["text"] for e in seen if e.kind == ev.JOB_LINE]
        assert texts[-1] == "after" and len(texts) == len(HOSTILE) + 1
        assert [e.payload["stage"] for e in seen if e.kind == ev.STAGE_SKIPPED] == \
            ["vocab", "prepare", "extract"]
        warnings = [e.payload["message"] for e in seen if e.kind == ev.CONSOLE_WARNING]
        assert len(warnings) == 2 and all("\n" not in w for w in warnings)
