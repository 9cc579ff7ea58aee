"""Alerts on the TUI (issue 53): the local host's real sampler, NVML through its test double,
a scripted box's trouble; each rule's incident is one alert, shown as a banner on the Overview
and Stats screens with a mark beside the GPU it names, and nothing on a healthy stream."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from console.tui.app import ConsoleApp
from console.tui.controller import LiveSource
from console.tui.render import ALERT_MARK
from console.tui.widgets.overview import OverviewView
from console.tui.widgets.stats import StatsView
from remote.link.hosts import Config, HostConfig
from remote.spine import events as ev
from tests.health_scenario import RULES, Box
from tests.tui_helpers import SIZE, plain, settle, wait_for


async def test_each_alert_is_one_banner_line_and_a_mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path / "nvml.json")
    for k, v in box.env().items():
        monkeypatch.setenv(k, v)
    hc = HostConfig(name="local", python=sys.executable, workdir=str(tmp_path / "box"))
    config = Config(hosts={"local": hc}, path=None, alerts={"brake_seconds": 0.5, "stall_minutes": 0.01})
    app = ConsoleApp(LiveSource(config), start_screen="overview")
    samples: list[Any] = []
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        bus = app.source.bus
        bus.add_callback(lambda e: samples.append(e) if e.kind == ev.STATS_SAMPLE else None)
        await app.source.controller.connect("local")
        await wait_for(pilot, lambda: len(samples) >= 20, timeout=60)
        host = app.state.hosts["local"]
        await settle(pilot)
        overview = app.screen.query_one(OverviewView)
        assert not host.alerts and not overview.query_one("#alerts", Static).display  # healthy
        box.ecc(2)
        box.xid(79)
        box.brake(True)
        bus.emit(ev.STAGE_START, "local", stage="train")  # and then no progress
        await wait_for(pilot, lambda: {"ecc_uncorrected", "xid", "brake", "stage_stalled"}
                       <= {a["rule"] for a in host.alerts}, timeout=60)
        box.lose_gpu(1)
        await wait_for(pilot, lambda: "gpu_missing" in {a["rule"] for a in host.alerts}, timeout=60)
        n = len(samples)
        await wait_for(pilot, lambda: len(samples) >= n + 15, timeout=60)  # trouble goes on
        await settle(pilot)
        assert Counter(a["rule"] for a in host.alerts) == Counter(RULES)
        assert overview.query_one("#alerts", Static).display
        banner = plain(overview.query_one("#alerts", Static))
        assert "5 alerts on this host" in banner and "gpu_missing: GPU 1 is missing" in banner
        gpus = plain(overview.query_one("#gpus", Static))
        row0 = next(line for line in gpus.splitlines() if line.strip().startswith("0 "))
        assert ALERT_MARK in row0
        await pilot.press("6")  # the Stats screen
        await settle(pilot)
        stats = app.screen.query_one(StatsView)
        assert stats.query_one("#alerts", Static).display
        assert plain(stats.query_one("#alerts", Static)) == banner
        history = plain(stats.query_one("#history", Static))
        assert any(line.strip().startswith(f"0 {ALERT_MARK}") for line in history.splitlines())
        await app.source.controller.aclose()


async def test_the_tui_stream_feeds_the_prometheus_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`console --prometheus PORT`: the endpoint reads the TUI's own bus (console/tui/launch.py),
    so a scrape while the TUI runs shows the samples its screens draw, from the one stream."""
    import asyncio

    from remote.ops.stats import serve_prometheus
    from tests.remote.stats.test_prometheus import _scrape

    box = Box(tmp_path / "nvml.json")
    for k, v in box.env().items():
        monkeypatch.setenv(k, v)
    hc = HostConfig(name="local", python=sys.executable, workdir=str(tmp_path / "box"))
    app = ConsoleApp(LiveSource(Config(hosts={"local": hc}, path=None)), start_screen="stats")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        endpoint = serve_prometheus(app.source.bus, 0)
        try:
            await app.source.controller.connect("local")
            host = app.state.hosts["local"]
            await wait_for(pilot, lambda: len(host.gpus) == 2, timeout=60)
            seen = await asyncio.to_thread(_scrape, endpoint.url)
        finally:
            endpoint.close()
            await app.source.controller.aclose()
    util = {(lb["Hostname"], lb["gpu"]): v for lb, v in seen["DCGM_FI_DEV_GPU_UTIL"]}
    assert util == {("local", "0"): 87.0, ("local", "1"): 12.0}
    assert [lb["gpu"] for lb, _ in seen["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"]] == ["0"]  # GPU 1 lacks ECC
