"""The cycle collector and the console (console/tui/collector.py, issue #17).

- a screen switch is painted with the collector held off, and the collector runs again after;
- once a replay's checkpoints are built, the start-up heap is frozen out of full collections,
  and handed back to the collector when the app ends;
- a pause never re-enables a collector that someone else had turned off.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from console.tui.collector import SwitchCollector
from tests.tui_helpers import SIZE, finish_replay, replay_app, wait_for
from tests.tui_sessions import demo_session


async def test_a_switch_is_painted_with_the_collector_held_and_freed_after(tmp_path: Path) -> None:
    app = replay_app(demo_session(tmp_path / "demo.jsonl"), start_screen="overview")
    paints: list[tuple[str, bool]] = []  # (screen shown, collector on) at each screen update
    original = app._display

    def display(screen: Any, renderable: Any) -> None:
        if renderable is not None:
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
            await wait_for(pilot, gc.isenabled)  # and on again once the paint is out
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
