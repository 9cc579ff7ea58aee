"""A console opened after the box finished a run shows what a console that watched it saw
(issue 42, point 1): the stage table, the loss curve and evaluate's offline acceptance come
from the run's own log on the box, not from the console's memory.

The demo (tests/demo_fixture.py, trained once per test session) is run again from `train`
(`console run --from train`: train and evaluate run, the rest is up to date): a watcher (the
console's model on the bus of the operation the TUI calls) follows that run from its start to
its end; a TUI connects while train runs and quits; the box finishes alone; a TUI opened
afterwards is held beside the watcher.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import Static

from console.tui.app import ConsoleApp
from console.tui.controller import LiveSource
from console.tui.model import ConsoleState, HostState
from console.tui.widgets.bench import offline_acceptance
from console.tui.widgets.stage_cells import metrics_cell, stage_cells
from pipeline import stages as stage_table
from remote.link.hosts import load_config
from remote.link.transport import LocalTransport
from remote.ops import pipeline as pipeline_ops
from remote.pipeline_runner import PipelineRunner
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests.demo_fixture import Demo, pipeline_runs
from tests.tui_helpers import SIZE, plain, settle, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # the demo fixture: minutes


@pytest.fixture
def demo(console_demo: Demo, monkeypatch: pytest.MonkeyPatch) -> Demo:
    """The demo's box, this process one of its consoles (its remembered runs)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(console_demo.state))
    return console_demo


async def _log_holds(run_dir: Path, needle: str, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while needle not in ((run_dir / "log").read_text(errors="replace")
                         if (run_dir / "log").exists() else ""):
        assert not (run_dir / "exit.json").exists(), f"the run ended before {needle!r}"
        assert loop.time() < end, f"{needle!r} never appeared in {run_dir / 'log'}"
        await asyncio.sleep(0.1)


async def _new_run(box: Path, before: list[Path], watch: asyncio.Task[None]) -> Path:
    for _ in range(1200):
        fresh = [r for r in pipeline_runs(box) if r not in before]
        if fresh:
            return fresh[-1]
        if watch.done():
            watch.result()  # its error, if it failed before launching
        await asyncio.sleep(0.1)
    raise AssertionError("the train run never appeared on the box")


async def _watch(runner: PipelineRunner, config: str | None, demo_dir: str | None) -> None:
    """The demo's box runner from train on (train and evaluate run, the rest is up to date),
    followed from its start to its end, as the TUI's actions follow it."""
    await pipeline_ops.run_pipeline(runner, config, demo_dir=demo_dir, start="train",
                                    following=set())


def _text(renderable: object) -> str:
    out = Console(width=SIZE[0], color_system=None, record=True)
    with out.capture() as cap:
        out.print(renderable)
    return cap.get()


def _stage_view(host: HostState, stage: str) -> tuple[object, ...]:
    """What the Pipeline screen draws of a stage and the state behind it."""
    st = host.stages[stage]
    cells = tuple(c.plain if hasattr(c, "plain") else str(c) for c in stage_cells(st))
    return (st.status, st.done, st.total, st.unit, st.seconds, st.bytes, st.outputs_count,
            st.completed, st.run_id, st.metrics, cells, metrics_cell(st))


async def test_a_console_reopened_after_the_box_finished_equals_the_one_that_watched(
        demo: Demo) -> None:
    config = load_config(str(demo.console_toml))
    hc = config.host("local")
    watcher, bus = ConsoleState(["local"]), EventBus()

    def fold(events: Sequence[Event]) -> None:  # as the TUI folds what the bus publishes
        watcher.apply_batch(events)

    bus.add_batch_callback(fold)
    transport = LocalTransport("local")
    await transport.connect()
    before = pipeline_runs(demo.box)
    runner, cfg, demo_dir = await pipeline_ops.box_pipeline(transport, hc, bus)
    watch = asyncio.create_task(_watch(runner, cfg, demo_dir))
    try:
        run_dir = await _new_run(demo.box, before, watch)
        await _log_holds(run_dir, '"type":"start","stage":"train"', timeout=600)
        # Held mid-train while a console connects, sees train run, and quits.
        pgid = int((run_dir / "pid").read_text())
        os.killpg(pgid, signal.SIGSTOP)
        try:
            first = ConsoleApp(LiveSource(config), start_screen="pipeline")
            async with first.run_test(size=SIZE) as pilot:
                h = first.state.host("local")
                await wait_for(pilot, lambda: "train" in h.stages
                               and h.stages["train"].status == "running"
                               and h.stages["train"].run_id == run_dir.name, timeout=120)
                assert "evaluate" not in h.stages or h.stages["evaluate"].status != "running"
        finally:
            with suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGCONT)
        await asyncio.wait_for(watch, 900)  # the box finished; the watcher saw it all
    finally:
        if not watch.done():
            watch.cancel()
        await transport.close()
    seen = watcher.host("local")
    assert seen.stages["evaluate"].status == "done" and seen.charts.loss
    assert "mean_length" in seen.stages["evaluate"].metrics  # evaluate ran in this run

    reopened = ConsoleApp(LiveSource(config), start_screen="pipeline")
    async with reopened.run_test(size=SIZE) as pilot:
        h = reopened.state.host("local")
        run = run_dir.name
        # Read to the end: the run's log (its exit), then the manifests (their completion times).
        await wait_for(pilot, lambda: run in h.jobs and not h.jobs[run].running
                       and all(s in h.stages and h.stages[s].status == "done" for s in stage_table.names())
                       and all(h.stages[s].completed for s in ("train", "evaluate")),
                       timeout=120)
        await settle(pilot)
        # The stage table: every stage done as in the watcher's; train and evaluate (what
        # this run ran) cell for cell, their figures, runs and manifests alike.
        assert {s: h.stages[s].status for s in stage_table.names()} == {
            s: seen.stages[s].status for s in stage_table.names()}
        for stage in ("train", "evaluate"):
            assert _stage_view(h, stage) == _stage_view(seen, stage), stage
            assert h.stages[stage].run_id == run_dir.name
        # The loss chart: the same curve, point for point.
        assert h.charts.loss == seen.charts.loss and len(h.charts.loss) >= 2
        # Bench: evaluate's offline acceptance.
        bench = _text(offline_acceptance(h))
        assert bench == _text(offline_acceptance(seen))
        assert "Offline acceptance (evaluate): mean length" in bench
        await pilot.press("7")  # the Bench screen
        await settle(pilot)
        shown = plain(reopened.query_one("#offline", Static))
        assert "Offline acceptance (evaluate)" in shown and "no result yet" not in shown
        # The top bar: connected, nothing left "in progress".
        top = plain(reopened.query_one("#topbar", Static))
        assert "● live" in top and "⟳" not in top, top
        # Read once: the run's log lines are in the state once, as in the watcher's.
        log_lines = len((run_dir / "log").read_text(errors="replace").splitlines())
        assert h.jobs[run_dir.name].tail.total == seen.jobs[run_dir.name].tail.total == log_lines
        assert not h.jobs[run_dir.name].running
