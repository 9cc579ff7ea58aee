"""The tab bar is one widget (console/tui/widgets/tab_bar.py): it draws what Textual's Tabs drew
(titles, the short ones under NARROW columns, the active one bright and underlined, the replay
tab only in replay mode), and a switch redraws it once at most, from its cache after that."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from rich.segment import Segment
from textual.strip import Strip

from console.tui.app import NARROW
from console.tui.widgets.tab_bar import RULE, TabBar, TabTitle
from tests.tui_helpers import SIZE, live_app, replay_app, settle
from tests.tui_sessions import demo_session

WIDE = " 1 Hosts  2 Overview  3 Probes  4 Patch  5 Pipeline  6 Stats/AllReduce  7 Bench "
SHORT = " 1 Hosts  2 Overview  3 Probes  4 Patch  5 Pipeline  6 Stats  7 Bench "


@asynccontextmanager
async def _bar(app: Any, size: tuple[int, int] = SIZE) -> AsyncIterator[tuple[Any, Any, TabBar]]:
    """The console running, settled, with its tab bar."""
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        yield app, pilot, app.query_one("#tabs", TabBar)


def _lit(bar: TabBar, strip: Strip) -> list[int]:
    """The columns of the rule `strip` drawn in the underline's colour."""
    color = bar.get_component_rich_style("tab-bar--underline").color
    cols: list[int] = []
    x = 0
    for seg in strip:
        if seg.style is not None and seg.style.color == color:
            cols += range(x, x + len(seg.text))
        x += len(seg.text)
    return cols


def _segment(strip: Strip, text: str) -> Segment:
    return next(seg for seg in strip if seg.text == text)


def _bright(bar: TabBar) -> list[str]:
    """The titles drawn in the active tab's style."""
    active = bar.get_component_rich_style("tab-bar--active")
    return [seg.text for seg in bar.render_line(0) if seg.text.strip() and seg.style == active]


def _span(line: str, label: str) -> list[int]:
    start = line.index(label)
    return list(range(start, start + len(label)))


async def test_the_bar_looks_as_tabs_did_and_a_switch_moves_the_highlight() -> None:
    async with _bar(live_app(start_screen="pipeline")) as (app, pilot, bar):
        assert not app.query("Tab") and not app.query("Tabs")  # Textual's widgets are gone
        titles, rule = bar.render_line(0), bar.render_line(1)
        assert titles.text == WIDE.ljust(SIZE[0]) and "Replay" not in titles.text
        assert set(rule.text) == {RULE, "╸", "╺"} and len(rule.text) == SIZE[0]
        pipeline = _segment(titles, "5 Pipeline")
        hosts = _segment(titles, "1 Hosts")
        assert pipeline.style != hosts.style and _bright(bar) == ["5 Pipeline"]
        underline = _lit(bar, rule)
        assert underline == _span(titles.text, "5 Pipeline")
        assert rule.text[underline[0] - 1] == "╸" and rule.text[underline[-1] + 1] == "╺"

        await pilot.press("6")
        await settle(pilot)
        titles, rule = bar.render_line(0), bar.render_line(1)
        assert bar.active == "stats"
        assert _segment(titles, "6 Stats/AllReduce").style == pipeline.style
        assert _segment(titles, "5 Pipeline").style == hosts.style
        assert _lit(bar, rule) == _span(titles.text, "6 Stats/AllReduce")


async def test_a_switch_draws_the_bar_once_and_a_switch_back_not_at_all() -> None:
    """Two lines per (width, active tab, focus, hovered tab): the second round of switches is
    served from the cache, and what it serves is the active tab's (checked above)."""
    async with _bar(live_app(start_screen="hosts")) as (_app, pilot, bar):
        keys = ["2", "5", "6", "1"]
        first = bar.paints
        for key in keys:
            await pilot.press(key)
            await settle(pilot)
        assert bar.paints - first == len(keys) - 1  # back to hosts: drawn at start-up already
        again = bar.paints
        for key in keys:
            await pilot.press(key)
            await settle(pilot)
            assert _bright(bar) == [bar.labels()[int(key) - 1]]
        assert bar.paints == again and bar.active == "hosts"


@pytest.mark.parametrize("width", [80, NARROW - 1])
async def test_under_narrow_columns_the_short_titles_are_drawn(width: int) -> None:
    async with _bar(live_app(start_screen="hosts"), size=(width, 24)) as (_app, _pilot, bar):
        assert bar.render_line(0).text == SHORT.ljust(width)
        assert bar.labels() == [t.strip() for t in SHORT.split("  ")]
        assert bar.labels(NARROW) == [t.strip() for t in WIDE.split("  ")]


async def test_the_replay_tab_is_there_only_in_replay_mode(tmp_path: Path) -> None:
    app = replay_app(demo_session(tmp_path / "demo.jsonl"), start_screen="replay", paused=True)
    async with _bar(app) as (_app, _pilot, bar):
        assert bar.render_line(0).text.rstrip().endswith("7 Bench  8 Replay")
        assert bar.names[-1] == "replay" and bar.active == "replay"


async def test_a_bar_too_narrow_for_its_tabs_keeps_the_active_one_in_view_and_clickable() -> None:
    async with _bar(live_app(start_screen="bench"), size=(40, 24)) as (app, pilot, bar):
        line = bar.render_line(0).text
        assert len(line) == 40 and "7 Bench" in line and "1 Hosts" not in line
        assert bar.tab_at(bar.tab_offset("bench")) == "bench"
        stats = bar.tab_offset("stats")
        assert 0 <= stats < 40 and line[stats:stats + 7] == "6 Stats"
        await pilot.click("#tabs", offset=(stats, 1))  # the underline row is part of the tab too
        await settle(pilot)
        assert app.active_screen_name == "stats" and bar.active == "stats"
        assert "6 Stats" in bar.render_line(0).text


async def test_the_hovered_tab_is_drawn_bright_and_left_wraps_around() -> None:
    async with _bar(live_app(start_screen="hosts")) as (app, pilot, bar):
        dim = _segment(bar.render_line(0), "3 Probes").style
        await pilot.hover("#tabs", offset=(bar.tab_offset("probes"), 0))
        await pilot.pause()
        assert bar.tab_at(bar.tab_offset("probes")) == "probes"
        assert _segment(bar.render_line(0), "3 Probes").style != dim
        assert app.active_screen_name == "hosts"  # hovering is not choosing
        bar.focus()
        await pilot.press("left")
        await settle(pilot)
        assert app.active_screen_name == "bench"  # from the first tab to the last shown


def test_a_bar_refuses_an_unknown_tab_with_its_name() -> None:
    tabs = [TabTitle("hosts", "1 Hosts", "1 Hosts"), TabTitle("stats", "6 Stats/AllReduce", "6 Stats")]
    with pytest.raises(ValueError, match="no tab 'replay' among hosts, stats"):
        TabBar(tabs, "replay")
    bar = TabBar(tabs, "hosts")
    with pytest.raises(ValueError, match="no tab 'pipe' among hosts, stats"):
        bar.active = "pipe"
    assert bar.active == "hosts"
    with pytest.raises(ValueError, match="at least one tab"):
        TabBar([], "hosts")


async def test_a_theme_change_redraws_the_cached_lines_in_its_colours() -> None:
    async with _bar(live_app(start_screen="hosts")) as (app, pilot, bar):
        before = _segment(bar.render_line(0), "2 Overview").style
        app.theme = "textual-light"
        await settle(pilot)
        after = _segment(bar.render_line(0), "2 Overview").style
        assert after is not None and before is not None and after.bgcolor != before.bgcolor
        assert after == bar.get_component_rich_style("tab-bar--tab")
