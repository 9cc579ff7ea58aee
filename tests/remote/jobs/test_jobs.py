"""Detached jobs over a transport: run directory, tail by offset, lock, cancel, cursors.

Runs against the local transport and, once remote.link.ssh is importable, against the real loopback
sshd (the same box-side helper, reached the way an operator reaches it).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from contextlib import aclosing
from pathlib import Path

import pytest

from console.sessions.reader import SessionReader
from console.sessions.recorder import Recorder
from console.sessions.writer import SessionWriter
from remote.errors import JobHelperError, JobLocked, JobNotFound
from remote.jobs.client import BATCH_LINES, Jobs
from remote.jobs.cursors import CursorStore
from remote.jobs.records import RunInfo
from remote.link.transport import LocalTransport, Transport
from remote.spine import events as ev
from remote.spine.bus import EventBus
from tests.processes import alive

PY = sys.executable

COUNT = (
    "import sys, time\n"
    "n = int(sys.argv[1]); pause = float(sys.argv[2])\n"
    "for i in range(1, n + 1):\n"
    "    print(i, flush=True)\n"
    "    if pause: time.sleep(pause)\n"
)


@pytest.fixture
def events() -> tuple[EventBus, list[ev.Event]]:
    bus = EventBus()
    seen: list[ev.Event] = []
    bus.add_callback(seen.append)
    return bus, seen


def jobs_for(t: Transport, workdir: Path, bus: EventBus | None = None, **kw: object) -> Jobs:
    return Jobs(t, str(workdir), host="box", bus=bus, python=PY, **kw)  # type: ignore[arg-type]


async def test_launch_tail_wait_and_run_dir(transport: Transport, tmp_path: Path,
                                            events: tuple[EventBus, list[ev.Event]]) -> None:
    bus, seen = events
    jobs = jobs_for(transport, tmp_path, bus)
    info = await jobs.launch([PY, "-c", COUNT + "print('last', end='')", "5", "0.01"], name="count")
    assert info.name == "count" and info.pid and info.state in ("running", "exited")
    lines = [line async for line in jobs.tail(info.run_id)]
    assert [x.text for x in lines] == ["1", "2", "3", "4", "5", "last"]
    assert [x.offset for x in lines] == [2, 4, 6, 8, 10, 14]
    done = await jobs.wait(info.run_id)
    assert (done.state, done.returncode, done.log_size) == ("exited", 0, 14)
    run_dir = tmp_path / "runs" / info.run_id
    assert json.loads((run_dir / "argv.json").read_text())[3:] == ["5", "0.01"]
    assert int((run_dir / "pid").read_text()) == info.pid
    assert json.loads((run_dir / "exit.json").read_text())["returncode"] == 0
    assert (run_dir / "log").read_bytes().endswith(b"5\nlast")
    kinds = [e.kind for e in seen]
    assert kinds.count(ev.JOB_LINE) == 6 and kinds[-1] == ev.JOB_EXIT
    started = next(e for e in seen if e.kind == ev.JOB_STARTED).payload
    assert started["run_id"] == info.run_id and started["pid"] == info.pid
    line3 = [e.payload for e in seen if e.kind == ev.JOB_LINE][2]
    assert line3 == {"run_id": info.run_id, "name": "count", "text": "3", "offset": 6}
    assert [r.run_id for r in await jobs.list()] == [info.run_id]


async def test_tail_from_offset_and_without_follow(transport: Transport, tmp_path: Path) -> None:
    jobs = jobs_for(transport, tmp_path)
    info = await jobs.launch([PY, "-c", COUNT, "20", "0"], name="n")
    await jobs.wait(info.run_id)
    first = [x async for x in jobs.tail(info.run_id, follow=False)]
    assert [x.text for x in first] == [str(i) for i in range(1, 21)]
    cut = first[8].offset
    rest = [x.text async for x in jobs.tail(info.run_id, offset=cut)]
    assert rest == [str(i) for i in range(10, 21)]


async def test_non_follow_tail_of_running_job_stops_at_what_is_there(
        transport: Transport, tmp_path: Path) -> None:
    jobs = jobs_for(transport, tmp_path)
    info = await jobs.launch(["sh", "-c", "echo a; echo b; exec sleep 30"], name="sleepy")
    try:
        for _ in range(100):
            if (await jobs.status(info.run_id)).log_size >= 4:
                break
            await asyncio.sleep(0.05)
        got = [x.text async for x in jobs.tail(info.run_id, follow=False)]
        assert got == ["a", "b"]
    finally:
        await jobs.cancel(info.run_id, grace=1)


# Bytes a log can hold: multi-byte UTF-8, a byte that is not UTF-8, JSON specials, control
# characters, an empty line, a carriage return, long lines (a block boundary falls inside some).
MIXED = (
    "import sys\n"
    "w = sys.stdout.buffer.write\n"
    "for i in range(int(sys.argv[1])):\n"
    "    if i // 400 % 2:  # runs of ASCII-only blocks between the others\n"
    "        w(b'caf\\xc3\\xa9 %d \\xe2\\x80\\x94 \\xf0\\x9f\\x9a\\x80\\n' % i)\n"
    "        w(b'bad \\xff byte\\n')\n"
    "    w(b'esc \\\\n \\\"q\\\" \\t \\x1b[0m\\n\\n')\n"
    "    w(b'cr\\r\\n' + b'x' * (i * 37 % 5000) + b'\\n')\n"
    "w(b'no newline \\xc3\\xa9')\n"
)


async def test_tail_offsets_and_recorded_lines_are_byte_exact_for_any_content(
        transport: Transport, tmp_path: Path) -> None:
    bus = EventBus()
    recorder = Recorder(SessionWriter(tmp_path / "s.jsonl", ["box"])).attach(bus)
    batches: list[int] = []
    bus.add_batch_callback(lambda es: batches.extend([len(es)] if es[0].kind == ev.JOB_LINE else []))
    jobs = jobs_for(transport, tmp_path / "box", bus)
    info = await jobs.launch([PY, "-c", MIXED, "3000"], name="mixed")
    await jobs.wait(info.run_id)
    lines = []
    async for x in jobs.tail(info.run_id):
        lines.append(x)
    recorder.close()
    assert max(batches) <= BATCH_LINES and sum(batches) == len(lines)
    raw = (tmp_path / "box" / "runs" / info.run_id / "log").read_bytes()
    pieces = raw.split(b"\n")
    assert [x.text for x in lines] == [p.decode("utf-8", "replace") for p in pieces]
    ends, pos = [], 0
    for piece in pieces[:-1]:
        pos += len(piece) + 1
        ends.append(pos)
    assert [x.offset for x in lines] == [*ends, len(raw)]
    with SessionReader(tmp_path / "s.jsonl") as r:
        recorded = [e for e in r.events() if e.kind == ev.JOB_LINE]
        assert not r.warnings
    assert [(e.payload["text"], e.payload["offset"]) for e in recorded] == \
        [(x.text, x.offset) for x in lines]
    assert {(e.host, e.payload["run_id"], e.payload["name"]) for e in recorded} == \
        {("box", info.run_id, "mixed")}


async def test_lock_refuses_second_launch_of_same_name(transport: Transport, tmp_path: Path) -> None:
    jobs = jobs_for(transport, tmp_path)
    first = await jobs.launch(["sleep", "30"], name="train stage")
    with pytest.raises(JobLocked) as caught:
        await jobs.launch(["true"], name="train stage")
    assert "train stage" in str(caught.value) and first.run_id in str(caught.value)
    assert caught.value.exit_code in (1, 4)
    other = await jobs.launch(["true"], name="another stage")  # other names are free
    await jobs.wait(other.run_id)
    await jobs.cancel(first.run_id, grace=1)
    again = await jobs.launch(["true"], name="train stage")  # free once the first ended
    assert (await jobs.wait(again.run_id)).returncode == 0


async def test_cancel_kills_the_whole_process_group(transport: Transport, tmp_path: Path,
                                                    events: tuple[EventBus, list[ev.Event]]) -> None:
    bus, seen = events
    jobs = jobs_for(transport, tmp_path, bus)
    # The job starts a grandchild that ignores nothing and would outlive a plain kill of the pid.
    script = "sleep 300 & echo child $!; trap '' TERM; wait"
    info = await jobs.launch(["sh", "-c", script], name="group")
    child = None
    async with aclosing(jobs.tail(info.run_id)) as lines:
        async for line in lines:
            child = int(line.text.split()[1])
            break
    assert child is not None
    done = await jobs.cancel(info.run_id, grace=0.5)
    assert done.state == "cancelled" and done.returncode is not None
    for _ in range(100):
        if not alive(child):
            break
        await asyncio.sleep(0.05)
    assert not alive(child), "the grandchild survived the cancel"
    assert seen[-1].kind == ev.JOB_EXIT and seen[-1].payload["state"] == "cancelled"


async def test_hostile_names_arrive_verbatim(transport: Transport, tmp_path: Path) -> None:
    hostile = ["a b", "it's", 'dq"x', "semi;colon", "$(touch PWNED)", "`touch PWNED2`",
               "new\nline", "*", "--", "-x"]
    wd = tmp_path / "work dir; $(touch PWNED3)"
    cwd = tmp_path / "cwd 'quoted' $(x)"
    cwd.mkdir()
    jobs = jobs_for(transport, wd)
    probe = "import json, os, sys; print(json.dumps([os.getcwd(), os.environ['ODD'], *sys.argv[1:]]))"
    info = await jobs.launch([PY, "-c", probe, *hostile], name="n; $(touch PWNED4) 'x'\n",
                             env={"ODD": "v $(touch PWNED5) ;"}, cwd=str(cwd))
    out = [x.text async for x in jobs.tail(info.run_id)]
    assert json.loads(out[0]) == [str(cwd), "v $(touch PWNED5) ;", *hostile]
    assert (await jobs.status(info.run_id)).name == "n; $(touch PWNED4) 'x'\n"
    for root in (tmp_path, Path.home(), Path.cwd()):
        assert not list(root.glob("PWNED*"))


async def test_unknown_run_and_bad_ids(transport: Transport, tmp_path: Path) -> None:
    jobs = jobs_for(transport, tmp_path)
    with pytest.raises(JobNotFound):
        await jobs.status("no-such-run")
    with pytest.raises(JobNotFound):
        await jobs.status("../etc")
    with pytest.raises(JobNotFound):
        [x async for x in jobs.tail("no-such-run")]


async def test_job_outlives_the_console_and_reports_lost(transport: Transport,
                                                         tmp_path: Path) -> None:
    jobs = jobs_for(transport, tmp_path)
    info = await jobs.launch(["sleep", "30"], name="survivor")
    await transport.close()
    await transport.connect()
    fresh = jobs_for(transport, tmp_path)  # as a new console would
    assert (await fresh.status(info.run_id)).state == "running"
    # The supervisor and the job die without writing exit.json (box rebooted): "lost".
    sup = int((tmp_path / "runs" / info.run_id / "supervisor.pid").read_text())
    os.kill(sup, signal.SIGKILL)
    os.killpg(info.pid or 0, signal.SIGKILL)
    for _ in range(100):
        state = (await fresh.status(info.run_id)).state
        if state != "running":
            break
        await asyncio.sleep(0.05)
    assert state == "lost"


async def test_command_not_found_is_an_exited_run(transport: Transport, tmp_path: Path) -> None:
    jobs = jobs_for(transport, tmp_path)
    info = await jobs.launch(["/no/such/binary", "x"], name="missing")
    done = await jobs.wait(info.run_id)
    assert done.returncode == 127
    assert "cannot start" in "".join([x.text async for x in jobs.tail(info.run_id)])


async def test_cursor_store_resumes_after_recorded_lines(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    session.write_text('{"format":"x"}\n')
    store = CursorStore(tmp_path / "cursors", session=session)
    store.save("box", "run-1", 10)
    assert store.load("box", "run-1") == 10
    # Lines recorded after the save (the console died before saving again) move it forward.
    with open(session, "a") as fh:
        for off in (12, 15):
            fh.write(ev.Event(ev.JOB_LINE, "box", {"run_id": "run-1", "text": "x",
                                                   "offset": off}).to_json() + "\n")
        fh.write(ev.Event(ev.JOB_LINE, "other", {"run_id": "run-1", "offset": 99}).to_json() + "\n")
        fh.write('{"ts":"2026-01-01T00:00:00.000Z","host":"box","kind":"job.line","payload":'
                 '{"run_id":"run-1","offset":50}')  # torn: never counted
    assert store.load("box", "run-1") == 15
    assert CursorStore(tmp_path / "cursors").load("box", "never-tailed") == 0


async def test_tail_saves_cursor(tmp_path: Path) -> None:
    t = LocalTransport()
    store = CursorStore(tmp_path / "cursors")
    jobs = jobs_for(t, tmp_path / "box", cursors=store)
    info = await jobs.launch([PY, "-c", COUNT, "50", "0"], name="c")
    got = []
    async with aclosing(jobs.tail(info.run_id)) as lines:  # closing saves the cursor
        async for line in lines:
            got.append(line)
            if len(got) == 7:
                break
    assert store.load("box", info.run_id) == got[-1].offset
    rest = [x.text async for x in jobs.tail(info.run_id, offset=store.load("box", info.run_id))]
    assert [x.text for x in got] + rest == [str(i) for i in range(1, 51)]


def test_malformed_run_record_is_a_clear_error() -> None:
    with pytest.raises(JobHelperError, match="malformed"):
        RunInfo.from_dict({"run_id": "x", "state": "exploded"})
    with pytest.raises(JobHelperError, match="malformed"):
        RunInfo.from_dict({"state": "running"})


def test_box_side_helper_is_stdlib_only_python38() -> None:
    """The job helper (remote/jobs/helper.py) and the siblings uploaded beside it run with
    whatever python the box or container has."""
    import ast

    from remote.jobs.install import HELPER, helper_files

    files = helper_files()
    assert files[-1] == HELPER and len(files) > 1
    siblings = {path.stem for path in files}
    for path in files:
        tree = ast.parse(path.read_text(), str(path), feature_version=(3, 8))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        allowed = set(sys.stdlib_module_names) | siblings
        assert imported <= allowed, (path.name, imported - allowed)
        assert not imported & {"console", "remote"}


def test_helper_session_survives_bad_requests_and_ends_on_eof(tmp_path: Path) -> None:
    import subprocess

    from remote.jobs.install import HELPER, helper_files

    box = tmp_path / "box"  # the helper as uploaded: alone with its siblings
    box.mkdir()
    for path in helper_files():
        (box / path.name).write_bytes(path.read_bytes())
    requests = [b"not json\n", b'["rm", "-rf", "/"]\n', json.dumps(["list", str(tmp_path)]).encode()
                + b"\n"]
    done = subprocess.run([sys.executable, str(box / HELPER.name), "serve"], input=b"".join(requests),
                          capture_output=True, timeout=30)
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0 and len(replies) == 3
    assert replies[0]["rc"] == 1 and "JSONDecodeError" in replies[0]["error"]
    assert replies[1]["rc"] == 1 and "not a served request" in replies[1]["error"]
    assert replies[2] == {"rc": 0, "out": ""}
