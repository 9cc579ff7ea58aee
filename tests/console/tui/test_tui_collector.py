"""The cycle collector and the console (console/tui/collector.py, issue #17).

- a screen switch is painted with the collector held off, and the collector runs again after;
- once a replay's checkpoints are built, the start-up heap is frozen out of full collections,
  and handed back to the collector when the app ends;
- a pause never re-enables a collector that someone else had turned off;
- the stream is folded after a switch's paint, not between its key and its paint.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

from console.tui.app import WRITE_OUT_S
from console.tui.collector import SwitchCollector
from remote.spine import events as ev
from remote.spine.events import Event
from tests.tui_helpers import SIZE, finish_replay, live_started, replay_app, wait_for
from tests.tui_sessions import HOST, demo_session


async def test_a_switch_is_painted_with_the_collector_held_and_freed_after(tmp_path: Path) -> None:
    app = replay_app(demo_session(tmp_path / "demo.jsonl"), start_screen="overview")
    paints: list[tuple[str, bool]] = []  # (screen shown, collector on) at each screen update
    original = app._display

    soon_after: list[bool] = []  # the collector on, half of WRITE_OUT_S after a switch's paint

    def display(screen: Any, renderable: Any) -> None:
        if renderable is not None:
            if not gc.isenabled() and app.collector.paused and not soon_after:
                asyncio.get_running_loop().call_later(
                    WRITE_OUT_S / 2, lambda: soon_after.append(gc.isenabled()))
            paints.append((app.active_screen_name, gc.isenabled()))
        original(screen, renderable)

    app._display = display  # type: ignore[method-assign]
    assert gc.isenabled()
    async with app.run_test(size=SIZE) as pilot:
        await finish_replay(pilot)
        await wait_for(pilot, lambda: app.checkpoints is not None and app.checkpoints.complete)
        await wait_for(pilot, lambda: app.collector.frozen)
        assert gc.get_freeze_count() > 1000  # Textual's DOM and stylesheets at least
        for key, name in (("6", "stats"), ("5", "pipeline"), ("2", "overview")):
            paints.clear()
            await pilot.press(key)
            await wait_for(pilot, lambda name=name: any(shown == name for shown, _ in paints))
            first = next(on for shown, on in paints if shown == name)
            assert first is False, f"to {name}: the collector was on at the switch's paint"
            await wait_for(pilot, gc.isenabled)  # on again once the paint is out
            # ... and not before: still off half of WRITE_OUT_S after the paint, while
            # Textual's writer thread sends it to the terminal.
            assert soon_after[:1] == [False], f"to {name}: {soon_after}"  # after its first paint
            soon_after.clear()
            assert not app.collector.paused
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # the ended app's heap is collectable again


def test_a_pause_leaves_a_collector_turned_off_by_someone_else_off() -> None:
    collector = SwitchCollector()
    gc.disable()
    try:
        collector.pause()
        assert not collector.paused
        collector.resume()
        assert not gc.isenabled()
    finally:
        gc.enable()
    collector.pause()
    assert not gc.isenabled() and collector.paused
    collector.pause()  # a second switch before the first's paint: still one pause
    collector.resume()
    assert gc.isenabled() and not collector.paused
    collector.resume()
    assert gc.isenabled()


async def test_a_stream_arriving_during_a_switch_is_folded_after_its_paint() -> None:
    """From a switch's key to its paint the pump folds nothing (the events queue, O(1) each);
    the paint released, they are folded and shown."""
    async with live_started(start_screen="overview") as (app, pilot):
        bus = app.source.bus
        app._hold_switch()  # what a key does first (action_show), held up to SWITCH_HOLD_S
        for k in range(20):
            bus.publish(Event.checked(ev.STATS_SAMPLE, HOST, {
                "source": "nvml", "gpus": [], "host": {"cpu": 40.0 + k, "mem_used": 2**30,
                                                       "mem_total": 2**34, "load1": 1.0}}))
        await pilot.pause(0.2)  # six pump frames
        assert len(app._pending) == 20 and app.state.host(HOST).cpu is None
        hold = app._switch_hold
        assert hold is not None
        app._release_switch(hold)
        await wait_for(pilot, lambda: not app._pending)
        assert app.state.host(HOST).cpu == 59.0  # the last sample
