"""Pilot tests for the defects of issue 15, one or more per defect; each failed before its fix.

Driven as an operator would: keys on a live app whose controller is the scripted test double
(tests/tui_helpers.py), a replayed session file, or the real LiveController on the built-in
local host with real detached jobs (remote.jobs.client)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Static

from console.tui.app import ConsoleApp
from console.tui.dialogs import ConfirmScreen
from console.tui.launch import exit_code
from console.tui.messages import HostSelected
from console.tui.widgets.common import TopBar
from console.tui.widgets.log_view import LogView
from console.tui.widgets.pipeline import PipelineView
from remote.errors import StageFailed
from remote.spine import events as ev
from remote.spine.bus import EventBus
from tests.tui_helpers import (
    SIZE,
    FixedHostsSource,
    ScriptedController,
    live_app,
    live_started,
    over_detached_job,
    plain,
    replayed,
    settle,
    wait_for,
)
from tests.tui_sessions import HOST, demo_session


def rows(app: ConsoleApp) -> list[str]:
    table = app.query_one("#stages", DataTable)
    return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]


def pipeline(app: ConsoleApp) -> PipelineView:
    view = app.view("pipeline")
    assert isinstance(view, PipelineView)
    return view


# -- defect 1: `s` over a run row ------------------------------------------------------------------

async def test_start_over_a_run_row_launches_nothing_and_does_not_crash() -> None:
    app = live_app(start_screen="pipeline")
    async with app.run_test(size=SIZE) as pilot:
        ctrl = app.source.controller
        assert isinstance(ctrl, ScriptedController)
        bus = ctrl.bus
        bus.emit(ev.JOB_STARTED, HOST, run_id="r-demo", name="pipeline-demo-setup", argv=["python"], pid=7, log="l")
        await settle(pilot)
        assert rows(app)[-1] == "demo-setup (run)"
        table = app.query_one("#stages", DataTable)
        table.focus()
        table.move_cursor(row=table.row_count - 1)
        await settle(pilot)
        assert pipeline(app).selected_run == "r-demo"
        await pilot.press("s")
        await settle(pilot)
        assert ctrl.calls == []  # no `python -m pipeline job:r-demo` on the box
        assert "s starts the selected stage" in app.notices[-1]
        # a stage whose name looks like a run key cannot collide with the run's row
        bus.emit(ev.STAGE_END, HOST, stage="job:r-demo", ok=False, seconds=0.1)
        await settle(pilot)
        assert app.is_running and "job:r-demo" in rows(app)


async def test_an_exception_in_a_screen_is_shown_on_screen(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, *args: Any) -> None:
        raise RuntimeError("boom in a view")

    async with live_started(start_screen="pipeline") as (app, pilot):
        monkeypatch.setattr(PipelineView, "update_view", broken)
        app.source.bus.emit(ev.STAGE_START, HOST, stage="train", run_id="r1")
        await settle(pilot)
        assert app.is_running
        error = app.query_one(".view-error", Static)
        assert "RuntimeError: boom in a view" in plain(error)
        assert app.errors and "boom in a view" in app.errors[-1]
        monkeypatch.undo()
        app.source.bus.emit(ev.STAGE_END, HOST, stage="train", ok=True, seconds=1.0)
        await settle(pilot)
        assert not app.query(".view-error")  # drawn again: the error line goes


async def test_a_console_that_died_on_an_exception_does_not_exit_zero() -> None:
    app = live_app(start_screen="hosts")

    async def crash() -> None:
        raise RuntimeError("unhandled")

    with pytest.raises(RuntimeError, match="unhandled"):  # run_test re-raises what ended the app
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.call_later(crash)
            await wait_for(pilot, lambda: app.return_code is not None)
    assert exit_code(app) == 1
    ok = live_app(start_screen="hosts")
    async with ok.run_test(size=SIZE) as pilot:
        await pilot.press("q")
    assert exit_code(ok) == 0


# -- defect 2: reattached jobs end -------------------------------------------------------------------

async def test_a_reattached_job_ends_when_its_run_exits(tmp_path: Path) -> None:
    go = tmp_path / "go"  # the run ends when the test says so, after the console reattached
    argv = ["sh", "-c", f"echo first; while [ ! -f {go} ]; do sleep 0.05; done; echo last"]
    async with over_detached_job(tmp_path / "box", argv, "pipeline-train", "hosts") as (app, pilot, run_id):
        await pilot.press("c", "5")
        h = app.state.host("local")
        await wait_for(pilot, lambda: run_id in h.jobs and h.jobs[run_id].tail.total == 1, timeout=30)
        assert h.jobs[run_id].running
        go.write_text("")
        await wait_for(pilot, lambda: not h.jobs[run_id].running, timeout=30)
        await settle(pilot)
        job = h.jobs[run_id]
        assert (job.state, job.returncode, job.tail.total) == ("exited", 0, 2)
        assert not h.running_jobs()
        await app.source.controller.aclose()


# -- defect 3: replay again after the end ------------------------------------------------------------

async def test_replay_plays_again_after_reaching_the_end(tmp_path: Path) -> None:
    async with replayed(demo_session(tmp_path / "s.jsonl")) as (app, pilot):
        r = app.replayer
        n = len(r.reader)
        assert r.position == n
        await pilot.press("0")
        await settle(pilot)
        assert r.position == 0 and app.replay_status() == f"paused 0/{n}"
        await pilot.press("space")
        await wait_for(pilot, lambda: r.position == n)
        await settle(pilot)
        assert app.state.host(HOST).stages["extract"].status == "running"


# -- defect 4: one host's panels on another ------------------------------------------------------------

async def test_switching_host_shows_only_that_hosts_pipeline() -> None:
    source = FixedHostsSource([HOST, "unreachable"], ScriptedController)
    app = ConsoleApp(source, start_screen="pipeline")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("s")  # prepare on gpu-box
        await wait_for(pilot, lambda: "prepare" in app.state.host(HOST).stages)
        await settle(pilot)
        assert "r-prepare" in plain(app.query_one("#artifacts", Static))
        app.post_message(HostSelected("unreachable"))
        await settle(pilot)
        assert "r-prepare" not in plain(app.query_one("#artifacts", Static))
        assert app.query_one(LogView).tail is None
        await pilot.press("x")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)  # nothing of gpu-box to cancel here
        assert app.notice_log[-1][:2] == ("cancel", "warning") and "nothing to cancel" in app.notices[-1]


# -- defect 5: titles that tell failed, cancelled and unavailable apart ----------------------------------

class FailingController(ScriptedController):
    outcome = "failed"

    async def start_stage(self, host: str, stage: str) -> None:
        await asyncio.sleep(0)
        if self.outcome == "cancelled":
            raise StageFailed(f"stage {stage} failed: {stage} exited -15 (cancelled)")
        raise StageFailed(f"stage {stage} failed: {stage} exited 1 (exited)")


async def test_failed_cancelled_and_nothing_to_cancel_have_their_own_titles() -> None:
    app = ConsoleApp(FixedHostsSource([HOST], FailingController), start_screen="pipeline")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await wait_for(pilot, lambda: bool(app.notice_log))
        assert app.notice_log[-1][:2] == ("start prepare failed", "error")
        ctrl = app.source.controller
        assert isinstance(ctrl, FailingController)
        ctrl.outcome = "cancelled"
        await pilot.press("s")
        await wait_for(pilot, lambda: len(app.notice_log) == 2)
        assert app.notice_log[-1][:2] == ("start prepare cancelled", "warning")
        await pilot.press("x")
        await wait_for(pilot, lambda: len(app.notice_log) == 3)
        assert app.notice_log[-1][0] == "cancel" and "nothing to cancel" in app.notice_log[-1][2]
        # the failures stay in the host's notification log after the toasts are gone
        await pilot.press("n")
        await settle(pilot)
        text = plain(app.screen.query_one("#notes-text", Static))
        assert "start prepare failed" in text and "start prepare cancelled" in text


# -- defect 6: selection by identity; a stage row shows its run's log --------------------------------------

async def test_selection_stays_on_its_row_when_rows_are_inserted_above() -> None:
    async with live_started(start_screen="pipeline") as (app, pilot):
        bus = app.source.bus
        table = app.query_one("#stages", DataTable)
        table.focus()
        await pilot.press("down", "down", "down")  # train
        await settle(pilot)
        assert pipeline(app).selected_stage == "train"
        # a run of prepare appears: a row is inserted above the selection
        bus.emit(ev.STAGE_START, HOST, stage="prepare", run_id="r-p")
        bus.emit(ev.JOB_STARTED, HOST, run_id="r-p", name="pipeline-prepare", argv=["python"], pid=1, log="l")
        await settle(pilot)
        assert rows(app)[:2] == ["prepare", " └ r-p"]
        assert pipeline(app).selected_stage == "train" and pipeline(app).selected_key == "stage:train"


def _stage_run(bus: EventBus, stage: str, run_id: str) -> None:
    """What the pipeline runner emits for a stage: its job `pipeline-<stage>` starts, then the
    stage's start names that run."""
    bus.emit(ev.JOB_STARTED, HOST, run_id=run_id, name=f"pipeline-{stage}", argv=["python"], pid=1, log="l")
    bus.emit(ev.STAGE_START, HOST, stage=stage, run_id=run_id)


async def test_a_stage_row_shows_its_runs_log_and_the_followed_stage_is_not_empty() -> None:
    async with live_started(start_screen="pipeline") as (app, pilot):
        bus = app.source.bus
        _stage_run(bus, "extract", "r-x")
        for i in range(3):
            bus.emit(ev.JOB_LINE, HOST, run_id="r-x", name="pipeline-extract", text=f"batch {i}", offset=i)
        await settle(pilot)
        view = pipeline(app)
        assert view.selected_stage == "extract" and view.selected_run == "r-x"
        log = app.query_one(LogView)
        assert log.tail is not None and [log.tail.line(i) for i in range(3)] == ["batch 0", "batch 1", "batch 2"]


# -- defect 8: the stage records parsed into columns, hidden from the log by default --------------------------

async def test_stage_records_become_columns_and_hide_from_the_log() -> None:
    async with live_started(start_screen="pipeline") as (app, pilot):
        bus = app.source.bus
        _stage_run(bus, "train", "r-t")
        lines = ['@@eagle3 {"type":"start","stage":"train"}', "speculators 0.9.0 on cpu",
                 '@@eagle3 {"type":"progress","stage":"train","done":3,"total":10,"unit":"steps","loss":1.2345,'
                 '"epoch":1}', "warning: something the operator should see"]
        for i, text in enumerate(lines):
            bus.emit(ev.JOB_LINE, HOST, run_id="r-t", name="pipeline-train", text=text, offset=i)
        bus.emit(ev.STAGE_PROGRESS, HOST, stage="train", done=3, total=10, unit="steps", rate=1.5, loss=1.2345,
                 epoch=1)
        await settle(pilot)
        table = app.query_one("#stages", DataTable)
        train = rows(app).index("train")
        assert str(table.get_row_at(train)[4]) == "loss 1.23 ep 1"  # 3 significant digits
        log = app.query_one(LogView)
        assert log.tail is not None and [log.tail.line(i) for i in range(len(log.tail))] == [
            "speculators 0.9.0 on cpu", "warning: something the operator should see"]
        assert "2 records hidden (l)" in str(log.border_subtitle)
        # a record arriving while shown: the visible log does not change, its count does
        bus.emit(ev.JOB_LINE, HOST, run_id="r-t", name="pipeline-train", offset=9,
                 text='@@eagle3 {"type":"progress","stage":"train","done":4,"total":10,"unit":"steps"}')
        await settle(pilot)
        assert "3 records hidden (l)" in str(log.border_subtitle)
        await pilot.press("l")
        await settle(pilot)
        assert log.tail is not None and len(log.tail) == 5 and log.tail.line(0).startswith("@@eagle3")
        assert "records shown" in str(log.border_subtitle)


async def test_evaluate_acceptance_reaches_the_bench_screen() -> None:
    async with live_started(start_screen="bench") as (app, pilot):
        assert "no result yet" in plain(app.query_one("#offline", Static))
        app.source.bus.emit(ev.STAGE_START, HOST, stage="evaluate", run_id="r-e")
        app.source.bus.emit(ev.STAGE_END, HOST, stage="evaluate", ok=True, seconds=3.0, run_id="r-e",
                            result={"mean_length": 2.41, "rate": 0.47, "per_position": [0.71, 0.45, 0.25],
                                    "untrained_mean_length": 1.02})
        await settle(pilot)
        text = plain(app.query_one("#offline", Static))
        assert "mean length 2.41, rate 47.0% (untrained head 1.02)" in text
        assert "71.0%" in text and "25.0%" in text


# -- defect 9: state that is always visible ----------------------------------------------------------------

class SlowController(ScriptedController):
    def __init__(self, bus: Any) -> None:
        super().__init__(bus)
        self.release = asyncio.Event()

    async def connect(self, host: str) -> None:
        await self.release.wait()
        await super().connect(host)


async def test_a_running_action_shows_in_the_top_bar_until_it_ends() -> None:
    app = ConsoleApp(FixedHostsSource([HOST], SlowController), start_screen="hosts")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: "⟳ connect…" in plain(app.query_one(TopBar)))
        ctrl = app.source.controller
        assert isinstance(ctrl, SlowController)
        ctrl.release.set()
        await wait_for(pilot, lambda: app.state.host(HOST).connection == "live")
        await settle(pilot)
        assert "⟳" not in plain(app.query_one(TopBar))


async def test_follow_state_is_on_the_log_border(tmp_path: Path) -> None:
    async with replayed(demo_session(tmp_path / "s.jsonl"), start_screen="pipeline") as (app, pilot):
        log = app.query_one(LogView)
        assert str(log.border_subtitle).startswith("following")
        await pilot.press("f")
        await settle(pilot)
        assert str(log.border_subtitle).startswith("paused")


async def test_quitting_with_jobs_running_asks_first() -> None:
    async with live_started(start_screen="pipeline") as (app, pilot):
        await pilot.press("s")  # the scripted prepare keeps running
        await wait_for(pilot, lambda: bool(app.state.host(HOST).running_jobs()))
        await pilot.press("q")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and "1 job still running (prepare on gpu-box)" in \
            app.screen.question
        assert "Yes" in plain(app.query_one("#keybar", Static))  # the footer is the dialog's
        await pilot.press("n")
        await settle(pilot)
        assert app.is_running
        await pilot.press("q", "y")
        await wait_for(pilot, lambda: not app.is_running)


# -- defect 10: replay hints are not live hints --------------------------------------------------------------

async def test_replay_shows_recorded_state_not_live_hints(tmp_path: Path) -> None:
    async with replayed(demo_session(tmp_path / "s.jsonl"), start_screen="hosts") as (app, _):
        bar = plain(app.query_one(TopBar))
        assert "was live" in bar and "● live" not in bar
        assert "c connects" not in plain(app.query_one("HostsView .title", Static))
    empty = tmp_path / "empty.jsonl"
    from tests.tui_sessions import write_session

    write_session(empty, [])
    async with replayed(empty, start_screen="overview") as (app, _):
        text = plain(app.query_one("#findings", Static))
        assert "3, k" not in text and "in this recording" in text


# -- defect 7: layouts that fit ---------------------------------------------------------------------------------

async def test_help_scrolls_at_80x24() -> None:
    async with live_started(start_screen="hosts", size=(80, 24)) as (app, pilot):
        await pilot.press("question_mark")
        await settle(pilot)
        box = app.screen.query_one("#help-box")
        assert box.max_scroll_y > 0 and box.scroll_y == 0  # taller than the screen
        await pilot.press("pagedown")
        await settle(pilot)
        assert box.scroll_y > 0


async def test_diff_scrolls_sideways_or_wraps(tmp_path: Path) -> None:
    async with replayed(demo_session(tmp_path / "s.jsonl"), start_screen="patch", size=(80, 24)) as (app, pilot):
        pane = app.query_one("#diff-pane")
        diff = app.query_one("#diff", Static)
        longest = max(len(line) for line in app.state.host(HOST).patches[next(iter(
            app.state.host(HOST).patches))].diff.splitlines())
        # Under 110 columns the diff starts wrapped to the pane (nothing cut at 80x24); w shows
        # whole lines, scrolled sideways, and back.
        assert pane.max_scroll_x == 0 and diff.size.width < longest  # wrapped to the pane
        assert "scroll sideways" in str(pane.border_subtitle)
        await pilot.press("w")
        await settle(pilot)
        assert pane.max_scroll_x > 0 and diff.size.width >= longest  # whole lines, scrolled sideways
        await pilot.press("w")
        await settle(pilot)
        assert pane.max_scroll_x == 0 and diff.size.width < longest


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_tables_fit_without_sideways_scrolling(tmp_path: Path, size: tuple[int, int]) -> None:
    async with replayed(demo_session(tmp_path / "s.jsonl"), start_screen="hosts", size=size) as (app, pilot):
        for screen, table_id in (("hosts", "#hosts-table"), ("pipeline", "#stages"), ("patch", "#patch-files")):
            await pilot.press(str(["hosts", "overview", "probes", "patch", "pipeline"].index(screen) + 1))
            await settle(pilot)
            table = app.query_one(table_id, DataTable)
            assert table.max_scroll_x == 0, f"{screen} scrolls sideways at {size}"
        env = str(app.query_one("#hosts-table", DataTable).get_row_at(0)[3])
        assert "2 GPUs" in env or size[0] < 100


# -- defect 12: GPU and host density ------------------------------------------------------------------------------

async def test_a_host_without_gpus_has_cpu_and_memory_history() -> None:
    async with live_started(start_screen="stats") as (app, pilot):
        assert "they start when the host connects (1, c)" in plain(app.query_one("#history", Static))
        for i in range(6):
            app.source.bus.publish(ev.Event(ev.STATS_SAMPLE, HOST, {
                "source": "none", "reason": "no NVIDIA GPU", "gpus": [],
                "host": {"cpu": 10.0 * i, "mem_used": 4e9, "mem_total": 16e9, "load1": 0.5}}))
        await settle(pilot)
        text = plain(app.query_one("#history", Static))
        assert "No GPUs (no NVIDIA GPU)" in text and "cpu % (0-100)" in text and "50%" in text
        assert "load1 (0-4)" in text
        # a load of 0.5 on a fixed 0-4 scale is a low bar, not a full one
        load_row = next(line for line in text.splitlines() if line.strip().startswith("load1"))
        assert "█" not in load_row and "▂" in load_row


def test_meters_use_fixed_scales_and_thresholds() -> None:
    from console.tui.render import meter

    assert meter(50, 100, 10) == ("█████·····", "green")
    assert meter(70, 100, 10)[1] == "yellow" and meter(90, 100, 10)[1] == "bold red"
    assert meter(None, 100, 4) == ("····", "dim")  # unknown is not zero
