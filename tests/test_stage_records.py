"""Stage records become stage events where job lines are produced: a live tail, a reattached
tail and a replay of the recorded session give the same stage progress."""

from __future__ import annotations

import sys
from contextlib import aclosing
from pathlib import Path

from console.sessions.files import Recorder, SessionReader, SessionWriter
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
ROOT = str(Path(__file__).resolve().parent.parent)
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
