"""Status that ends (issue 42, point 2): no "in progress" mark outlives its work, rows in
pipeline order, rates only where they mean something, the footer's help and quit titles at 80
columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Static

from console.tui.host_state import HostState, StageState
from console.tui.widgets.common import activity_label, fit_keys
from remote.jobs.stage_records import stage_event
from remote.spine import events as ev
from remote.spine.events import Event
from tests.tui_helpers import live_started, plain, replayed, settle
from tests.tui_sessions import HOST, Clock, write_session

RUNNER = "20261206T060000Z-pipeline-ab12cd"


def _failed_run(path: Path) -> Path:
    """A recorded session: the box runner builds the demo, prepares (an older box's progress
    record: a rate over 2 ms), runs vocab, and is killed in it; its last stage never ends."""
    c = Clock()
    events = [Event.checked(ev.CONNECTION_UP, HOST, {}, c.tick(1)),
              Event.checked(ev.JOB_STARTED, HOST, {
                  "run_id": RUNNER, "name": "pipeline", "pid": 7, "log": "/w/runs/log",
                  "argv": ["python", "-m", "pipeline", "run"]}, c.tick(1))]
    records: list[dict[str, Any]] = [
        {"type": "start", "stage": "demo-setup", "reason": "build the demo"},
        {"type": "end", "stage": "demo-setup", "ok": True, "seconds": 9.7},
        {"type": "start", "stage": "prepare", "reason": "no manifest"},
        {"type": "progress", "stage": "prepare", "done": 61000, "total": 61000,
         "unit": "tokens", "rate": 30472854.7},
        {"type": "end", "stage": "prepare", "ok": True, "seconds": 0.4},
        {"type": "start", "stage": "vocab", "reason": "no manifest"},
        {"type": "progress", "stage": "vocab", "done": 50, "total": 100, "unit": "steps",
         "rate": 5.0, "elapsed": 10.0},
    ]
    for rec in records:
        made = stage_event(rec, RUNNER, str(rec["stage"]))
        assert made is not None
        events.append(Event.checked(made[0], HOST, made[1], c.tick(1)))
    events.append(Event.checked(ev.JOB_EXIT, HOST, {"run_id": RUNNER, "name": "pipeline",
                                                    "state": "killed", "returncode": -9},
                                c.tick(1)))
    return write_session(path, events)


def _rows(table: DataTable[Any]) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_a_recorded_failed_stage_leaves_no_mark_running(tmp_path: Path) -> None:
    async with replayed(_failed_run(tmp_path / "s.jsonl"), start_screen="pipeline") as (app, _):
        h = app.state.host(HOST)
        assert h.stages["vocab"].status == "failed" and "killed" in h.stages["vocab"].reason
        assert not [s.name for s in h.stages.values() if s.status == "running"]
        assert not h.running_jobs()
        rows = _rows(app.query_one("#stages", DataTable))
        assert not [r for r in rows if "running" in r[1]], rows
        names = [r[0].strip() for r in rows if not r[0].lstrip().startswith("└")]
        assert names[:6] == ["demo-setup", "prepare", "extract", "vocab", "train", "evaluate"]
        by_name = {r[0].strip(): r for r in rows}
        # 2 ms of prepare: no rate, its figures; vocab's 10 s of steps: a rate, 3 digits
        assert "tokens/s" not in by_name["prepare"][3] and "61,000" in by_name["prepare"][3]
        assert "5.00 steps/s" in by_name["vocab"][3], by_name["vocab"]
        top = plain(app.query_one("#topbar", Static))
        assert "⟳" not in top


def test_a_pipeline_action_marks_the_stage_running_now() -> None:
    host = HostState("box")
    host.stages["prepare"] = StageState("prepare", status="done")
    host.stages["vocab"] = StageState("vocab", status="running")
    assert activity_label("start prepare", host) == "pipeline: vocab"
    assert activity_label("resume pipeline", host) == "pipeline: vocab"
    assert activity_label("connect", host) == "connect"
    host.stages["vocab"].status = "failed"
    assert activity_label("start prepare", host) == "start prepare"


def test_the_footer_keeps_help_and_quit_titles_when_short_of_room() -> None:
    pairs = [(str(i), f"Tab{i}") for i in range(1, 8)] + [("?/f1", "Help"), ("q", "Quit"),
                                                            ("s", "Start stage"), ("x", "Cancel")]
    fitted = dict(fit_keys(pairs, 70))
    assert fitted["?/f1"] == "Help" and fitted["q"] == "Quit"
    assert fitted["s"] == "Start"  # the screen's own keys keep a word before the tabs' names
    assert [k for k, _ in fit_keys(pairs, 70)] == [k for k, _ in pairs]


async def test_at_80_columns_the_footer_names_help_and_quit() -> None:
    for screen in ("pipeline", "bench", "patch"):
        async with live_started(start_screen=screen, size=(80, 24)) as (app, _):
            footer = plain(app.query_one("#keybar", Static), 80)
            assert "?/f1  Help" in footer and "q  Quit" in footer, (screen, footer)


async def test_no_speedup_chart_without_a_speedup_measured() -> None:
    """One label measured (no baseline beside it): its throughput is drawn, the speedup chart
    is not (its axes would hold nothing); the line says what a speedup needs."""
    async with live_started(start_screen="bench") as (app, pilot):
        for conc in (1, 2):
            app.source.bus.emit(ev.BENCH_POINT, HOST, label="speculative", concurrency=conc,
                                output_tok_s=94.51766890708626 * conc, req_s=0.7, ttft_p50=0.2,
                                ttft_p99=0.4, tpot_p50=0.025, tpot_p99=0.03,
                                acceptance={"rate": 0.06837606837606838, "mean_length": 1.2})
        await settle(pilot)
        assert app.query_one("#chart-throughput").display
        assert not app.query_one("#chart-speedup").display
        speedup = app.query_one("#speedup", Static)
        assert speedup.display and "needs a baseline" in plain(speedup)
        sweep = plain(app.query_one("#sweep-table", Static))
        assert "94.5" in sweep and "6.84%" in sweep and "94.517" not in sweep
