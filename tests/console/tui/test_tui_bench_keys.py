"""The Bench screen's serve/bench keys without an engine: bad `console bench run` options are a
clear error (the screen keeps running, nothing starts), a cancelled dialog does nothing, and a
replay does not offer the keys at all. The real engine run is tests/console/tui/test_tui_serve.py."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input

from console.tui.dialogs import AskScreen
from tests.tui_helpers import SIZE, local_app, refused_options, replay_app, settle, wait_for
from tests.tui_sessions import demo_session


async def test_bad_bench_options_are_a_clear_error(tmp_path: Path) -> None:
    app = local_app(tmp_path / "box", "bench")
    async with app.run_test(size=SIZE) as pilot:
        message = await refused_options(app, pilot, "b", "--concurrency", "--concurrency 1,x --rounds 2",
                                        "bench failed")
        assert "--concurrency" in message and "1,x" in message
        assert app.bench_options["local"] == "--concurrency 1,x --rounds 2"  # kept to fix
        assert not app.state.host("local").bench_points
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, AskScreen))
        assert app.screen.query_one(Input).value == "--concurrency 1,x --rounds 2"
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, AskScreen) and not app.activity
        await app.source.controller.aclose()


async def test_serve_dialog_cancel_starts_nothing(tmp_path: Path) -> None:
    app = local_app(tmp_path / "box", "bench")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, AskScreen))
        assert app.screen.query_one(Input).value == "demo"
        await pilot.press("escape")
        await settle(pilot)
        assert "speculative server not started" in app.notices
        assert not app.state.host("local").servers and not app.activity
        await app.source.controller.aclose()


async def test_replay_offers_no_serve_or_bench_keys(tmp_path: Path) -> None:
    app = replay_app(demo_session(tmp_path / "s.jsonl"), start_screen="bench")
    async with app.run_test(size=SIZE) as pilot:
        for key in ("g", "o", "z", "b"):
            await pilot.press(key)
        await settle(pilot)
        assert not isinstance(app.screen, AskScreen) and not app.activity
        footer = str(app.query_one("#keybar").render())
        assert "Pause/Play" in footer  # the replay's own keys are there
        assert not any(word in footer for word in ("Serve", "Baseline", "Stop srv", "Bench"))
