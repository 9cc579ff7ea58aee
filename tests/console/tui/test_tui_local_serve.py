"""Bench's `g` on `local` (issue 42, point 5): with no vLLM in local's python and no box
environment built, the operator is told the one command that builds it, not "No module named
'vllm'" from a server that died (the vLLM box environment found: tests/remote/ops/
test_local_serve_python.py; the engine served from the TUI: test_tui_serve.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input

from console.tui.dialogs import AskScreen
from tests.box_env import REPO
from tests.tui_helpers import SIZE, local_app, settle, wait_for


async def test_g_on_local_without_vllm_names_the_command_that_builds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAGLE3_TEST_CACHE", str(tmp_path / "no-box-env"))
    app = local_app(tmp_path / "box", "hosts")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("c")
        host = app.state.host("local")
        await wait_for(pilot, lambda: host.connection == "live")
        await pilot.press("7", "g")
        await wait_for(pilot, lambda: isinstance(app.screen, AskScreen))
        app.screen.query_one(Input).value = "demo"
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("serve speculative failed" in n.text
                                          for n in host.notes), timeout=60)
        note = next(n.text for n in host.notes if "serve speculative failed" in n.text)
        assert f"python3 {REPO / 'scripts' / 'box_env.py'} vllm032" in note, note
        assert "No module named" not in note and not host.servers
        await wait_for(pilot, lambda: not app.activity)
