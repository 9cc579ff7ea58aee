"""The box carries the pipeline (issue #28, point 5): one detached runner on the box runs every
remaining stage; consoles only start it, watch it and come back to it.

Real parts throughout: the session's demo (tests/demo_fixture.py) was trained by the box runner
after its console was SIGKILLed during extract; the runs here are real torch stages of that
demo (evaluate, the cheapest) on the local host and through the loopback sshd. Timing is never
asserted: where a test needs a run to still be going while a console starts, it stops the run's
process group (SIGSTOP) and continues it (SIGCONT) once the console is attached, as design.md §4
simulates a network drop by SIGKILLing the sshd children.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from console.cli import main as console_main
from console.sessions.reader import SessionReader
from console.tui.app import ConsoleApp
from console.tui.controller import LiveSource
from console.tui.widgets.pipeline import LogView
from remote.link.hosts import load_config
from remote.spine import events as ev
from tests.demo_fixture import (
    Demo,
    console_process,
    new_run,
    pipeline_runs,
    ssh_box,
    wait_ended,
    wait_for_record,
)
from tests.sshd_harness import Sshd
from tests.tui_helpers import SIZE, plain, settle, wait_for

pytestmark = pytest.mark.slow

STAGES = ("prepare", "extract", "vocab", "train", "evaluate")
RECORD = "@@eagle3 "


def _events(session: Path) -> list[ev.Event]:
    with SessionReader(session) as reader:
        return list(reader.events())


def _records(log: str) -> list[dict[str, object]]:
    return [json.loads(line[len(RECORD):]) for line in log.splitlines() if line.startswith(RECORD)]


@pytest.fixture
def state(demo: Demo, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's consoles keep their laptop state where the demo's consoles kept theirs."""
    monkeypatch.setenv("XDG_STATE_HOME", str(demo.state))
    return demo.state


@pytest.fixture(scope="module")
def demo(console_demo: Demo) -> Demo:
    return console_demo


@contextmanager
def stopped(run_dir: Path) -> Iterator[None]:
    """The run's process group (the box runner and its stage) stopped, then continued."""
    pgid = int((run_dir / "pid").read_text())
    os.killpg(pgid, signal.SIGSTOP)
    try:
        yield
    finally:
        with suppress(ProcessLookupError):  # continued and ended already
            os.killpg(pgid, signal.SIGCONT)


def test_a_killed_console_leaves_the_box_going_through_evaluate(demo: Demo) -> None:
    carried = demo.carried
    assert carried is not None
    assert carried.console_rc == -signal.SIGKILL
    # killed once extract had started, long before evaluate
    at_kill = [(r["type"], r["stage"]) for r in _records(carried.log_at_kill)]
    assert ("start", "extract") in at_kill and ("start", "evaluate") not in at_kill
    # then no console of this demo anywhere on the machine, while the box went on
    assert carried.polls > 0 and carried.consoles_seen == 0
    after = _records(carried.log[len(carried.log_at_kill):])
    assert [r["stage"] for r in after if r["type"] == "end"] == ["extract", "vocab", "train",
                                                                 "evaluate"]
    evaluate = next(r for r in after if r["type"] == "end" and r["stage"] == "evaluate")
    assert evaluate["ok"] is True and float(str(evaluate["seconds"])) > 0
    assert carried.exit["state"] == "exited" and carried.exit["returncode"] == 0
    assert (demo.out / "manifests" / "evaluate.json").exists()
    # the killed console recorded nothing of what happened after it died
    # (how far its tail got before the kill is a race: the box's log is the truth)
    seen = {(e.kind, e.payload.get("stage")) for e in _events(demo.root / "killed.jsonl")}
    assert (ev.JOB_STARTED, None) in seen and (ev.STAGE_END, "evaluate") not in seen


def test_the_next_headless_start_shows_five_stages_done_with_times_and_sizes(
        demo: Demo) -> None:
    events = _events(demo.root / "first.jsonl")
    skipped = {e.payload["stage"]: e.payload for e in events if e.kind == ev.STAGE_SKIPPED}
    manifests = {e.payload["stage"]: e.payload for e in events if e.kind == ev.STAGE_MANIFEST}
    assert list(skipped) == list(STAGES) and list(manifests) == list(STAGES)
    for stage in STAGES:
        m = manifests[stage]
        assert m["complete"] is True and m["seconds"] > 0 and m["bytes"] > 0, m
        assert m["outputs"] >= 1 and m["completed"].startswith("20")
        assert skipped[stage]["bytes"] == m["bytes"]  # the box runner's skip said the same
        assert "took" in m["summary"] and "in " in m["summary"]
    assert not [e for e in events if e.kind == ev.STAGE_NOT_RUN]


def _stage_rows(app: ConsoleApp) -> dict[str, list[str]]:
    table = app.query_one("#stages", DataTable)
    rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
    return {r[0]: r for r in rows if r[0] in STAGES}


async def test_the_next_tui_start_reattaches_by_itself_and_shows_five_stages_done(
        demo: Demo, state: Path, tmp_path: Path) -> None:
    """No key pressed: the TUI reconnects to the host where this laptop ran the pipeline and
    shows each stage from its manifest (status, size, time). `auto_reattach = false` keeps it
    from connecting at all."""
    app = ConsoleApp(LiveSource(load_config(str(demo.console_toml))), start_screen="pipeline")
    async with app.run_test(size=SIZE) as pilot:
        h = app.state.host("local")
        try:
            # done as the manifests say (their completion times): the finished runs' logs,
            # read first, pass through their own states (done, then skipped by a later run)
            await wait_for(pilot, lambda: all(h.stages.get(s) is not None and h.stages[s].status
                                              == "done" and h.stages[s].completed
                                              for s in STAGES), timeout=120)
        except AssertionError:
            raise AssertionError(f"{[(n.level, n.text) for n in h.notes]} {h.stages}") from None
        await settle(pilot)
        assert any("reattaching to local: pipeline run" in n.text and "auto_reattach" in n.text
                   for n in h.notes)
        rows = _stage_rows(app)
        for stage in STAGES:
            st = h.stages[stage]
            assert st.bytes and st.bytes > 0 and st.seconds and st.completed
            _name, status, _bar, detail, _metrics, seconds = rows[stage]
            assert status == "done" and " in " in detail and "output" in detail, rows[stage]
            assert ("KiB" in detail or "MiB" in detail or " B " in detail) and seconds != "-"
        shown = plain(app.query_one("#artifacts", Static))
        # the selected stage's run, read from the box (its log), beside the run found
        assert "exited rc=0" in shown and "found: exited on the box" in shown
        assert h.pipeline_run["how"] == "found"  # the run the stages come from, ended
        await app.source.controller.aclose()

    off = tmp_path / "console.toml"
    off.write_text(demo.console_toml.read_text() + "\n[console]\nauto_reattach = false\n")
    app = ConsoleApp(LiveSource(load_config(str(off))), start_screen="pipeline")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.pause(1.0)
        await settle(pilot)
        h = app.state.host("local")
        assert h.connection == "unknown" and not h.stages and not h.notes
        await app.source.controller.aclose()


async def test_a_run_still_going_is_reattached_by_the_tui_and_attached_by_console_run(
        demo: Demo, state: Path) -> None:
    """A console starts the box runner (evaluate again) and is killed; while the run is held
    going, the next TUI start reattaches to it by itself, its `u` attaches without a second
    tail, and `console run` attaches (the job lock) instead of starting another; once the run
    goes on, all of them see evaluate end."""
    before = pipeline_runs(demo.box)
    console = console_process(demo, demo.root / "evaluate-killed.jsonl", "--pipeline",
                              str(demo.config), "--from", "evaluate")
    try:
        run_dir = new_run(demo.box, before, proc=console)
        wait_for_record(run_dir, '"type":"info","stage":"pipeline"', timeout=120)
    finally:
        console.kill()
        console.wait()
    headless = None
    with stopped(run_dir):
        app = ConsoleApp(LiveSource(load_config(str(demo.console_toml))),
                         start_screen="pipeline")
        async with app.run_test(size=SIZE) as pilot:
            h = app.state.host("local")
            await wait_for(pilot, lambda: h.pipeline_run.get("run_id") == run_dir.name
                           and run_dir.name in h.jobs, timeout=120)
            await settle(pilot)
            assert h.pipeline_run["how"] == "reattached" and h.jobs[run_dir.name].running
            assert "reattached: running on the box" in plain(app.query_one("#artifacts", Static))
            await pilot.press("u")  # the run this console already tails: attach, no 2nd tail
            await wait_for(pilot, lambda: any("already going" in n.text for n in h.notes),
                           timeout=120)
            headless = console_process(demo, demo.root / "attached.jsonl", "--demo")
            said = demo.root / "attached.out"
            await wait_for(pilot, lambda: f"pipeline run {run_dir.name} attached" in
                           said.read_text(errors="replace"), timeout=120)
            assert not (run_dir / "exit.json").exists()  # held going all along
            os.killpg(int((run_dir / "pid").read_text()), signal.SIGCONT)
            # the run ends: evaluate's end record, then every stage from its manifest
            await wait_for(pilot, lambda: not h.jobs[run_dir.name].running
                           and all(h.stages[s].status == "done" for s in STAGES)
                           and not app.activity, timeout=300)
            await settle(pilot)
            job = h.jobs[run_dir.name]
            log_lines = (run_dir / "log").read_text(errors="replace").splitlines()
            assert job.tail.total == len(log_lines)  # every line once, though `u` attached
            # the earlier runs' evaluate, read from the box on connect, then this one's
            assert job.returncode == 0 and h.stages["evaluate"].runs[-1] == run_dir.name
            assert h.stages["evaluate"].runs.count(run_dir.name) == 1
            log = app.query_one(LogView)
            assert log.job is not None and log.job.run_id == run_dir.name
            await app.source.controller.aclose()
    assert headless is not None
    assert headless.wait(timeout=300) == 0
    events = _events(demo.root / "attached.jsonl")
    runs = [e.payload for e in events if e.kind == ev.PIPELINE_RUN]
    assert [(r["run_id"], r["how"]) for r in runs] == [(run_dir.name, "attached")]
    assert [e.payload["stage"] for e in events if e.kind == ev.STAGE_END] == ["evaluate"]
    assert not [e for e in events if e.kind == ev.JOB_STARTED]  # nothing launched
    assert [r for r in pipeline_runs(demo.box) if r not in before] == [run_dir]
    assert wait_ended(run_dir, 30)["returncode"] == 0


def test_an_ssh_drop_mid_run_leaves_the_run_going_and_the_console_following_it(
        demo: Demo, sshd: Sshd, state: Path, tmp_path: Path) -> None:
    """Through the loopback sshd: the console's connection is cut (the sshd children
    SIGKILLed) while the box runner runs evaluate; the run goes on, the console reconnects,
    follows it to its end from where it was, and exits 0."""
    box = tmp_path / "sshbox"
    cfg, console_toml = ssh_box(demo, sshd, tmp_path, box)
    dropped: list[tuple[int, bool]] = []

    def drop_mid_run() -> None:
        run_dir = new_run(box, [], timeout=300)
        wait_for_record(run_dir, '"type":"start","stage":"evaluate"', timeout=300)
        with stopped(run_dir):  # the run cannot end while the connection is cut
            running = not (run_dir / "exit.json").exists()
            dropped.append((sshd.drop_connections(), running))

    watcher = threading.Thread(target=drop_mid_run, daemon=True)
    watcher.start()
    session = tmp_path / "ssh-drop.jsonl"
    rc = console_main(["run", "--host", "box", "--config", str(console_toml), "--pipeline",
                       str(cfg), "--from", "evaluate", "--session", str(session)])
    watcher.join(timeout=60)
    assert rc == 0
    assert dropped and dropped[0][0] >= 1 and dropped[0][1], dropped
    events = _events(session)
    kinds = [e.kind for e in events]
    assert ev.CONNECTION_DOWN in kinds
    assert kinds.index(ev.CONNECTION_DOWN) < kinds.index(ev.STAGE_END)  # cut before the end
    assert [e.payload["stage"] for e in events if e.kind == ev.STAGE_END] == ["evaluate"]
    (run_dir,) = pipeline_runs(box)  # one run: the drop launched nothing again
    assert json.loads((run_dir / "exit.json").read_text())["returncode"] == 0
    lines = [e for e in events if e.kind == ev.JOB_LINE]
    offsets = [e.payload["offset"] for e in lines]
    assert offsets == sorted(set(offsets))  # every line once, in order, across the drop
    assert len(lines) == len((run_dir / "log").read_bytes().splitlines())
