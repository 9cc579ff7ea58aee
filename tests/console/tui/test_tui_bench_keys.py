"""The Bench screen's serve/bench keys without an engine: bad `console bench run` options are a
clear error (the screen keeps running, nothing starts), a cancelled dialog does nothing, and a
replay does not offer the keys at all. The real engine run is tests/console/tui/test_tui_serve.py."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input

from console.tui.app import ConsoleApp
from console.tui.controller import LiveSource
from console.tui.dialogs import AskScreen
from remote.link.hosts import Config, default_local
from tests.tui_helpers import SIZE, replay_app, settle, wait_for
from tests.tui_sessions import demo_session


def _local_app(tmp_path: Path) -> ConsoleApp:
    host = default_local(workdir=str(tmp_path / "box"))
    return ConsoleApp(LiveSource(Config(hosts={"local": host}, path=None)), start_screen="bench")


async def test_bad_bench_options_are_a_clear_error(tmp_path: Path) -> None:
    app = _local_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, AskScreen))
        assert "--concurrency" in app.screen.query_one(Input).value  # the defaults, editable
        app.screen.query_one(Input).value = "--concurrency 1,x --rounds 2"
        await pilot.press("enter")
        await wait_for(pilot, lambda: any(t == "bench failed" for t, _, _ in app.notice_log))
        _, severity, message = next(n for n in app.notice_log if n[0] == "bench failed")
        assert severity == "error" and "--concurrency" in message and "1,x" in message
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
    app = _local_app(tmp_path)
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
