"""The Fleet screen's row per box (console/tui/fleet_rows.py), folded from events by the real
reducers (console/tui/model.py): the state word, load cells, running jobs, the patch word as
`console probe env --host GROUP` says it, the served acceptance, and the one problem line."""

from __future__ import annotations

from typing import Any

from console.tui.fleet_rows import fleet_row, fleet_rows, totals
from console.tui.model import ConsoleState
from remote.spine import events as ev
from remote.spine.events import Event


def fold(state: ConsoleState, kind: str, on: str, **payload: Any) -> None:
    state.apply(Event(kind, on, payload))


def test_a_row_per_box_from_its_events() -> None:
    state = ConsoleState(["a", "b", "c"])
    fold(state, ev.CONNECTION_UP, "a")
    fold(state, ev.STATS_SAMPLE, "a", source="nvml", host={
        "cpu": 12.0, "mem_used": 4.0, "mem_total": 16.0, "load1": 1.0}, gpus=[
        {"index": 0, "util": 50, "mem_used": 20, "mem_total": 80},
        {"index": 1, "util": 100, "mem_used": 60, "mem_total": 80}])
    fold(state, ev.JOB_STARTED, "a", run_id="r1", name="train", argv=["x"], pid=7)
    fold(state, ev.PATCH_PLANNED, "a", file="w.py", recipes=[{"name": "r", "applies": True}])
    fold(state, ev.BENCH_WATCH, "a", acceptance={"rate": 0.6, "mean_length": 2.345})
    row = fleet_row(state.host("a"))
    assert (row.state, row.problem) == ("● live", "")
    assert row.cells == ("12%", "25%", "2", "75%", "50%", "1", "unpatched", "2.35")

    fold(state, ev.PATCH_APPLIED, "a", file="w.py", recipes=[{"name": "r", "in_effect": True}])
    assert fleet_row(state.host("a")).cells[6] == "patched"
    fold(state, ev.PATCH_ROLLED_BACK, "a", file="w.py", recipes=[{"name": "r", "in_effect": False}])
    assert fleet_row(state.host("a")).cells[6] == "rolled back"

    fold(state, ev.CONNECTION_DOWN, "b", error="[Errno 111] Connect call failed")
    fold(state, ev.CONSOLE_ERROR, "c", message="group g: no such host 'c'")
    rows = {r.host: r for r in fleet_rows(state)}
    assert rows["b"].state == "✖ down" and rows["b"].problem == "[Errno 111] Connect call failed"
    assert rows["b"].cells == ("-", "-", "-", "-", "-", "-", "-", "-")
    assert rows["c"].state == "○ off" and rows["c"].problem == "group g: no such host 'c'"
    assert totals(list(rows.values())) == "3 hosts, 1 up, 2 GPUs, 1 job running"
    # a replay says what the recording saw, not a connection of this console's
    assert fleet_row(state.host("b"), "replay").state == "✖ was down"


def test_served_acceptance_falls_back_to_bench_points_then_the_server_state() -> None:
    state = ConsoleState(["a"])
    fold(state, ev.SERVE_STARTING, "a", role="speculative", url="http://x", run_id="s1")
    assert fleet_row(state.host("a")).cells[7] == "starting"
    fold(state, ev.BENCH_POINT, "a", concurrency=1, acceptance={"mean_length": 3.0})
    assert fleet_row(state.host("a")).cells[7] == "3.00"
