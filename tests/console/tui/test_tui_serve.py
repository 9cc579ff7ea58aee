"""Issue 15: the TUI drives the real local vLLM box from the Bench screen.

A real vLLM 0.32 (CPU, the box environment) behind the loopback sshd, with the demo's trained
EAGLE-3 head (tests/engine_fixture.py, shared with test_engine_serve.py). The operator, in
the TUI: connects, `g` starts the speculative server (the top bar says so while the engine
loads), `b` runs a sweep with `console bench run` options, the Bench screen shows acceptance
per /metrics window while the server runs; the console is closed and opened again, and the
server row (URL, model, pid) and the sweep table are back, read from the box (issue 42); `z`
stops it. A server that cannot start shows
its engine log's tail. The actions go through remote/ops/ as `console serve` and `console bench`
do (tests/remote/ops/test_ops_routing.py keeps it so).

One engine start in this module (the engine lock: run it with
`flock /tmp/eagle3-engine.lock`, as every engine test).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from textual.widgets import Input, Static

from console.tui import controller as ctl
from console.tui.app import ConsoleApp
from console.tui.controller import LiveSource
from console.tui.dialogs import AskScreen, ConfirmScreen
from console.tui.widgets.bench import server_rows
from console.tui.widgets.common import TopBar
from remote.link.hosts import load_config
from tests.engine_fixture import HOST, EngineBox, answers
from tests.tui_helpers import SIZE, plain, settle, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.ssh, pytest.mark.timeout(1800)]


async def _open(app: ConsoleApp, pilot, host: str) -> None:  # type: ignore[no-untyped-def]
    app.query_one("#hosts-table").focus()
    names = list(app.state.hosts)
    await pilot.press(*["down"] * names.index(host), "enter")
    await settle(pilot)
    assert app.current_host == host
    await pilot.press("c")
    await wait_for(pilot, lambda: app.state.host(host).connection == "live", timeout=60)
    await pilot.press("7")
    await settle(pilot)


async def _answer(app: ConsoleApp, pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: isinstance(app.screen, AskScreen))
    app.screen.query_one(Input).value = text
    await pilot.press("enter")


async def test_serve_bench_live_acceptance_and_stop_from_the_bench_screen(
        engine_box: EngineBox, monkeypatch: pytest.MonkeyPatch) -> None:
    engine_box.release()  # no server of the fixture's: this one is the TUI's
    monkeypatch.setattr(ctl, "WATCH_INTERVAL_S", 2.0)  # several windows within one short sweep
    app = ConsoleApp(LiveSource(load_config(str(engine_box.console_toml))), start_screen="hosts")
    try:
        await _drive(app, engine_box)
    except BaseException:  # a failed run must not leave its engine to the next test (one engine)
        engine_box.running["speculative"] = "started by the TUI test"
        engine_box.release()
        raise


async def _drive(app: ConsoleApp, engine_box: EngineBox) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await _open(app, pilot, HOST)
        host = app.state.host(HOST)
        await pilot.press("g")
        await _answer(app, pilot, "demo")
        # while the engine loads: the activity line, and the server row says starting
        await wait_for(pilot, lambda: "serve speculative" in plain(app.query_one(TopBar)), timeout=30)
        await wait_for(pilot, lambda: "speculative" in host.servers, timeout=120)
        await settle(pilot)
        assert "starting" in plain(app.query_one("#servers", Static))
        await wait_for(pilot, lambda: host.servers["speculative"].state == "ready", timeout=900)
        await wait_for(pilot, lambda: not app.activity, timeout=30)
        await settle(pilot)
        assert host.servers["speculative"].url == engine_box.url and answers(engine_box.url)
        assert "ready" in plain(app.query_one("#servers", Static))

        # Results an earlier test kept on this box were read on connect: this sweep's come after.
        earlier, summary0 = len(host.bench_points), dict(host.bench_summary)
        await pilot.press("b")
        prompts = engine_box.out / "prepare" / "eval.jsonl"
        await _answer(app, pilot, f"--concurrency 1,2 --rounds 2 --max-tokens 24 --prompts {prompts}")
        await wait_for(pilot, lambda: len(host.bench_points) >= earlier + 2
                       and host.bench_summary != summary0, timeout=600)
        points = host.bench_points[earlier:]
        measured = sum(p["acceptance"]["drafts"] for p in points)
        # The watch spans the whole sweep (it began when the server answered), so once the
        # window after the sweep's end is in, its windows hold every draft the points counted
        # (and the warm-up's): the live figures and the sweep's come from the same counters.
        await wait_for(pilot, lambda: sum(w["acceptance"].get("drafts") or 0
                                          for w in host.bench_watch) >= measured, timeout=60)
        await settle(pilot)
        assert [p["concurrency"] for p in points] == [1, 2]
        assert all(p["acceptance"]["drafts"] > 0 for p in points)
        busy = [w for w in host.bench_watch if (w["acceptance"].get("drafts") or 0) > 0]
        for w in busy:  # vLLM's definitions over the window's own counter deltas
            acc = w["acceptance"]
            assert acc["rate"] == pytest.approx(acc["accepted"] / acc["draft_tokens"])
            assert acc["mean_length"] == pytest.approx(1 + acc["accepted"] / acc["drafts"])
            assert 1.0 <= acc["mean_length"] <= 4.0 and len(acc["per_position"]) == 3
        shown = plain(app.query_one("#bench-watch", Static))
        assert "Live acceptance per window" in shown
        assert f"{busy[-1]['acceptance']['mean_length']:.2f}" in shown
        sweep = plain(app.query_one("#sweep-table", Static), width=200)
        assert "speculative" in sweep
        servers = plain(app.query_one("#servers", Static), width=200)
        rows, summary = server_rows(host), dict(host.bench_summary)
        srv = host.servers["speculative"]
        assert srv.pid is not None and srv.model, srv
        await app.source.controller.aclose()

    # Reopened (issue 42): the server that is up and the sweep the box keeps come back from
    # the box, as the console that started and ran them showed them.
    again = ConsoleApp(LiveSource(load_config(str(engine_box.console_toml))), start_screen="hosts")
    async with again.run_test(size=SIZE) as pilot:
        await _open(again, pilot, HOST)
        h = again.state.host(HOST)
        everything = len(host.bench_points)
        await wait_for(pilot, lambda: "speculative" in h.servers
                       and len(h.bench_points) >= everything
                       and h.bench_summary.get("summary") == summary["summary"], timeout=120)
        await settle(pilot)
        assert server_rows(h) == rows
        assert h.servers["speculative"].url == engine_box.url
        assert plain(again.query_one("#servers", Static), width=200) == servers

        def row(p: dict[str, object]) -> tuple[object, ...]:
            return (p["label"], p["concurrency"], p["requests"], p["output_tok_s"], p["ttft_p50"],
                    p["tpot_p50"], p["acceptance"])

        assert [row(p) for p in h.bench_points] == [row(p) for p in host.bench_points]
        assert [row(p) for p in h.bench_points[earlier:]] == [row(p) for p in points]
        assert plain(again.query_one("#sweep-table", Static), width=200) == sweep
        assert h.bench_summary["summary"] == summary["summary"]

        await pilot.press("z")
        await wait_for(pilot, lambda: isinstance(again.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: h.servers["speculative"].state == "stopped", timeout=120)
        await settle(pilot)
        assert "stopped" in plain(again.query_one("#servers", Static))
        assert not answers(engine_box.url)
        await again.source.controller.aclose()


async def test_a_server_that_cannot_start_shows_its_log_tail(engine_box: EngineBox,
                                                               tmp_path: Path) -> None:
    """The same box, but a python without vLLM: the server job dies while starting, and the
    Bench screen and the error say why in the engine log's own words. No engine starts."""
    toml = engine_box.console_toml.read_text().replace(f"[hosts.{HOST}]", "[hosts.novllm]")
    toml = toml.replace(f'python = "{engine_box.python}"', f'python = "{sys.executable}"')
    assert sys.executable in toml
    config = tmp_path / "console.toml"
    config.write_text(toml)
    app = ConsoleApp(LiveSource(load_config(str(config))), start_screen="hosts")
    async with app.run_test(size=SIZE) as pilot:
        await _open(app, pilot, "novllm")
        host = app.state.host("novllm")
        await pilot.press("o")
        await _answer(app, pilot, "demo")
        await wait_for(pilot, lambda: host.servers.get("baseline") is not None
                       and host.servers["baseline"].state == "failed", timeout=300)
        await wait_for(pilot, lambda: not app.activity, timeout=60)
        await settle(pilot)
        srv = host.servers["baseline"]
        assert any("vllm" in line for line in srv.log_tail), srv.log_tail
        shown = plain(app.query_one("#servers", Static), width=200)
        assert "baseline server failed" in shown and "vllm" in shown
        title, severity, message = app.notice_log[-1]
        assert title == "serve baseline failed" and severity == "error"
        assert "last log lines" in message
        await app.source.controller.aclose()
