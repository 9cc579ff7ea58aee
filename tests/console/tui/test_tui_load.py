"""The TUI under a stream of events (issue #17): what it draws per event versus per frame.

- FastTable (console/tui/table_lines.py) yields exactly the segments Rich renders for the
  views' tables, at every width, and hands back to Rich what it does not draw itself;
- a stream of stats samples reaches the visible view at most once per REFRESH_S, and the last
  sample is on screen once the stream stops;
- a view not on screen is told nothing; shown, it draws the latest state;
- a switch to a screen shown before is painted in one update, with its view updated and focused.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from console.tui.app import REFRESH_S
from console.tui.model import ConsoleState
from console.tui.table_lines import FastTable, simple
from console.tui.widgets.common import View
from console.tui.widgets.overview import gpu_table, jobs_table
from console.tui.widgets.pipeline import LogView
from console.tui.widgets.stats import history_table, host_history
from remote.spine import events as ev
from remote.spine.events import Event
from tests.tui_helpers import SIZE, finish_replay, live_app, live_started, plain, replay_app, settle
from tests.tui_sessions import HOST, T0, demo_session

HOST_LOAD = {"cpu": 12.0, "mem_used": 2**35, "mem_total": 2**38, "load1": 2.0}


def _sample(gpus: list[dict[str, Any]]) -> Event:
    return Event.checked(ev.STATS_SAMPLE, HOST, {"source": "nvml", "gpus": gpus, "host": HOST_LOAD})


def _gpus(k: int, count: int = 8) -> list[dict[str, Any]]:
    return [{"index": g, "name": "NVIDIA H200", "util": (k * 7 + g * 13) % 101,
             "mem_used": (60 + g) * 2**30, "mem_total": 141 * 2**30, "power": 100.0 + 55 * g,
             "power_limit": 700, "temp": 50 + g, "sm_clock": 1980, "pcie_tx": 2**20 * g,
             "procs": [{"pid": 4242 + g, "name": "python3", "mem_used": 2**34}] if g % 3 == 0
             else []} for g in range(count)]


def _host(samples: int = 130) -> Any:
    state = ConsoleState([HOST])
    for k in range(samples):
        state.apply(Event(ev.STATS_SAMPLE, HOST, {
            "source": "nvml", "gpus": _gpus(k),
            "host": {"cpu": 10.0 + k % 50, "mem_used": 2**35, "mem_total": 2**38,
                     "load1": 1.0 + k % 7}}, T0))
    return state.host(HOST)


@pytest.mark.parametrize("width", [60, 80, 100, 118, 140, 200])
def test_fast_table_yields_richs_own_segments(width: int) -> None:
    host = _host()
    console = Console(width=width, color_system="truecolor", legacy_windows=False,
                      file=open("/dev/null", "w"))
    narrow = width < 100
    drawn_by_lines = 0
    jobs = _jobs()
    for make in (lambda: gpu_table(host, 24, narrow), lambda: history_table(host, narrow),
                 lambda: host_history(host, narrow), lambda: jobs_table(jobs[:4]),
                 lambda: jobs_table(jobs)):
        table = make()
        assert simple(table)
        fast_table = FastTable(table)
        # Textual renders with a height in the options (a title must not be padded to it)
        for options in (console.options, console.options.update(height=30)):
            rich = [list(line) for line in console.render_lines(make(), options)]
            fast = [list(line) for line in console.render_lines(fast_table, options)]
            assert fast == rich  # segment for segment: text, style and boundaries
        drawn_by_lines += fast_table.lines(console, console.options) is not None
    # at 60 columns only the first jobs table fits (Rich shrinks the others: FastTable hands
    # them over); at 100 the non-narrow GPU tables are wider than 100; the last jobs table
    # has a tab in a line (Rich expands it: drawn by Rich)
    assert drawn_by_lines == {60: 1, 100: 2}.get(width, 4)


def _jobs() -> list[Any]:
    """Running jobs whose last lines are empty, short, cut by the column (wide characters
    too), with escapes (drawn visibly, styled) and a tab, as the jobs table gets them."""
    state = ConsoleState([HOST])
    lasts = ["", "step 12 loss 2.345", "step 1234 loss 2.345 lr 1e-4 tokens/s 12345 grad norm 0.5 x",
             "日本語のログ行" * 6, "\x1b[31mred\x1b[0m and a tab\tin it"]
    for i, last in enumerate(lasts):
        run = f"20261203T00084{i}Z-train-a51c5{i}"
        state.apply(Event(ev.JOB_STARTED, HOST, {"run_id": run, "name": f"pipeline-train{i}",
                                                 "argv": ["python"], "pid": 4000 + i, "log": "/l"}, T0))
        for k, text in enumerate(["first", last] if last else []):
            state.apply(Event(ev.JOB_LINE, HOST, {"run_id": run, "name": "train", "text": text,
                                                  "offset": k}, T0))
    return state.host(HOST).running_jobs()


def test_fast_table_hands_what_it_does_not_draw_to_rich() -> None:
    console = Console(width=80, color_system="truecolor", file=open("/dev/null", "w"))
    wrapped = Table(box=None)
    wrapped.add_column("a")  # wrappable: Rich may wrap it over lines
    wrapped.add_row("one two three")
    ratio = Table(box=None)
    ratio.add_column("a", no_wrap=True, ratio=1)
    ratio.add_row(Text("x", style="red"))
    for table in (wrapped, ratio):
        assert not simple(table)
        assert ([list(x) for x in console.render_lines(FastTable(table), console.options)]
                == [list(x) for x in console.render_lines(table, console.options)])


async def test_a_stream_of_samples_reaches_the_view_at_most_once_per_refresh() -> None:
    async with live_started(start_screen="overview") as (app, pilot):
        view = app.view("overview")
        assert view is not None
        posts: list[float] = []
        original = view.update_view

        def spy(state: ConsoleState, host: Any, domains: frozenset[str]) -> None:
            posts.append(time.perf_counter())
            original(state, host, domains)

        view.update_view = spy  # type: ignore[method-assign]
        bus = app.source.bus
        sent = 0
        end = time.perf_counter() + 1.5
        while time.perf_counter() < end:  # 8 GPUs, 100 samples/s: 10x a real box
            bus.publish(_sample(_gpus(sent)))
            sent += 1
            await pilot.pause(0.01)
        last_util = _gpus(sent - 1)[0]["util"]
        await pilot.pause(REFRESH_S * 2)  # the held refresh goes out after the stream stops
        await pilot.pause()
        assert sent > 50 and 2 <= len(posts) < sent / 2
        gaps = [b - a for a, b in pairwise(posts)]
        assert min(gaps) >= REFRESH_S * 0.95  # never two draws within one refresh period
        shown = plain(app.query_one("#gpus", Static))
        assert f"{last_util:>3}%" in shown.splitlines()[2]  # GPU 0's row: the last sample


async def test_a_hidden_view_is_told_nothing_and_shown_draws_the_latest() -> None:
    app = live_app(start_screen="overview")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")  # mount the Stats screen, then leave it
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        stats = app.view("stats")
        assert isinstance(stats, View)
        told: list[frozenset[str]] = []
        original = stats.update_view

        def spy(state: ConsoleState, host: Any, domains: frozenset[str]) -> None:
            told.append(domains)
            original(state, host, domains)

        stats.update_view = spy  # type: ignore[method-assign]
        for k in range(20):
            app.source.bus.publish(_sample(_gpus(k, 2)))
            await pilot.pause(0.02)
        await settle(pilot)
        assert told == []  # the Overview was told; the Stats screen, hidden, was not
        await pilot.press("6")
        await settle(pilot)
        assert told and told[0] == frozenset()  # shown: everything at once
        history = plain(app.query_one("#history", Static))
        assert f"{_gpus(19, 2)[1]['util']:>3}" in history.splitlines()[3]  # GPU 1, last sample


async def test_a_screen_switch_is_painted_once(tmp_path: Path) -> None:
    """Once a screen's view exists (its first show mounts it), switching to it paints the new
    screen when it is ready: not the old screen blurred first, nor the new one before its view
    and focus are updated: one screen update (Textual's own Screen rendered it twice, the
    layout and then the whole screen again for the focus; MainScreen's focus does not repaint)."""
    app = replay_app(demo_session(tmp_path / "demo.jsonl"), start_screen="overview")
    paints = _count_updates(app)
    async with app.run_test(size=SIZE) as pilot:
        await finish_replay(pilot)
        for key in "652":
            await pilot.press(key)
            await pilot.pause(0.2)
        for key, name in (("6", "stats"), ("5", "pipeline"), ("2", "overview"), ("5", "pipeline"),
                          ("6", "stats")):
            paints.clear()
            await pilot.press(key)
            for _ in range(5):
                await pilot.pause(0.05)
            assert app.active_screen_name == name
            assert paints == [name], f"to {name}: {paints}"


class _TrainingLog:
    """A started `train` job on the live app's bus; calling it publishes n more log lines."""

    def __init__(self, app: Any) -> None:
        self.bus = app.source.bus
        self.lines = 0
        self.bus.publish(Event.checked(ev.JOB_STARTED, HOST, {"run_id": "r-train", "name": "train",
                                                              "argv": ["python"], "pid": 7,
                                                              "log": "/w/l"}))

    def __call__(self, n: int) -> None:
        for _ in range(n):
            self.bus.publish(Event.checked(ev.JOB_LINE, HOST, {"run_id": "r-train", "name": "train",
                                                               "text": f"train line {self.lines}",
                                                               "offset": self.lines}))
            self.lines += 1


def _assert_shows_the_newest(log: LogView, more: _TrainingLog) -> None:
    """The newest line at the bottom of the view, every line in it, scrolled to the end."""
    height = log.scrollable_content_region.height
    assert log.render_line(height - 1).text.rstrip() == f"train line {more.lines - 1}"
    assert log.virtual_size.height == more.lines and log.scroll_y == log.max_scroll_y


@asynccontextmanager
async def _pipeline_with_a_long_log() -> AsyncIterator[tuple[Any, Any, LogView, _TrainingLog]]:
    """The live app on the Pipeline screen, its log view showing a job's 100 lines."""
    app = live_app(start_screen="pipeline")
    async with app.run_test(size=SIZE) as pilot:
        more = _TrainingLog(app)
        more(100)
        await settle(pilot)
        yield app, pilot, app.query_one(LogView), more


def _count_layouts(app: Any) -> list[bool]:
    """The `scroll` flag of every screen layout from now on (False: a full re-layout)."""
    layouts: list[bool] = []
    screen = app.screen
    original = screen._refresh_layout

    def counted(size: Any = None, scroll: bool = False) -> None:
        layouts.append(scroll)
        original(size, scroll)

    screen._refresh_layout = counted
    return layouts


async def test_a_growing_log_does_not_re_lay_out_the_screen() -> None:
    """A job printing into a log taller than its view: each refresh shows the newest line at
    the bottom with the scrollbar at the end, and never re-lays out the screen (Textual's
    virtual_size would: 4 screen layouts a second while a job prints)."""
    async with _pipeline_with_a_long_log() as (app, pilot, log, more):
        assert log.job is not None and log.job.run_id == "r-train" and log.show_vertical_scrollbar
        layouts = _count_layouts(app)
        for _ in range(4):
            more(25)
            await settle(pilot)
            _assert_shows_the_newest(log, more)
        assert False not in layouts, f"screen layouts while the log grew: {layouts}"


async def test_a_log_grown_while_hidden_is_shown_with_the_switchs_one_layout() -> None:
    """Lines that arrived while the Pipeline screen was hidden are drawn by the switch back:
    one screen layout (the switch's own), the newest line at the bottom, and no horizontal
    scrollbar for lines that fit. The view's size is 0x0 while hidden; the log's width was
    taken from it, changed on every show, and re-laid out the screen a second time."""
    async with _pipeline_with_a_long_log() as (app, pilot, log, more):
        assert log.show_vertical_scrollbar and not log.show_horizontal_scrollbar
        layouts = _count_layouts(app)
        for _ in range(3):
            await pilot.press("2")
            await settle(pilot)
            more(50)
            await settle(pilot)
            layouts.clear()
            await pilot.press("5")
            for _ in range(6):
                await pilot.pause(0.05)
            assert app.active_screen_name == "pipeline"
            assert layouts.count(False) == 1, f"screen layouts on the switch back: {layouts}"
            assert not log.show_horizontal_scrollbar
            _assert_shows_the_newest(log, more)


def _count_updates(app: Any) -> list[str]:
    """The screen shown by each compositor update sent to the terminal from now on."""
    updates: list[str] = []
    original = app._display

    def display(screen: Any, renderable: Any) -> None:
        if renderable is not None:
            updates.append(app.active_screen_name)
        original(screen, renderable)

    app._display = display
    return updates


async def _away_and_back(pilot: Any, more: Any, grown: int, reset: Callable[[], None]) -> None:
    """Overview, `grown` more log lines while the Pipeline screen is hidden, `reset` (what the
    test counts starts from zero), then the key back to the Pipeline."""
    await pilot.press("2")
    await settle(pilot)
    more(grown)
    await settle(pilot)
    reset()
    await pilot.press("5")


async def test_a_switch_back_to_a_scrolled_log_is_drawn_by_its_first_update() -> None:
    """The switch to a Pipeline screen whose log has a vertical scrollbar is drawn by its first
    update, whether lines arrived while it was hidden or not; what follows is the log's
    scrollbar alone. Textual refreshes a scroll view's scrollbars on every layout (its own
    virtual size never equals the one the layout computes): that refresh is a second, small
    update (2 columns of the view's height), kept since issue #40 rather than skipped through
    ScrollView's private _size_updated (measured within noise: docs/measurements.md)."""
    async with _pipeline_with_a_long_log() as (app, pilot, log, more):
        assert log.show_vertical_scrollbar
        updates: list[Any] = []
        original = app._display

        def display(screen: Any, renderable: Any) -> None:
            if renderable is not None:
                updates.append((app.active_screen_name, renderable))
            original(screen, renderable)

        app._display = display
        for grown in (0, 30, 0):
            await _away_and_back(pilot, more, grown, updates.clear)
            for _ in range(6):
                await pilot.pause(0.05)
            assert app.active_screen_name == "pipeline"
            assert [name for name, _ in updates] == ["pipeline"] * len(updates) and updates
            first = {y for y, _, _ in updates[0][1].spans}
            assert len(first) >= SIZE[1] - 2, f"{grown} grown: the first update drew {len(first)} lines"
            bar = log.vertical_scrollbar.region
            for _, later in updates[1:]:
                assert all(bar.x <= x1 and x2 <= bar.right and bar.y <= y < bar.bottom
                           for y, x1, x2 in later.spans), f"{grown} grown: {later.spans}"
            _assert_shows_the_newest(log, more)


async def test_a_switch_back_to_the_pipeline_rewrites_only_the_stage_rows_that_changed() -> None:
    """The stage table is told every row on each show: unchanged rows are not written again (a
    rebuild re-measured every cell of every row for the column widths and repainted the table
    on every switch); the run whose log grew is, and shows its count."""
    from console.tui.widgets.quick_table import QuickTable

    async with _pipeline_with_a_long_log() as (app, pilot, _log, more):
        table = app.query_one("#stages", QuickTable)
        written: list[str] = []
        rebuilt: list[bool] = []
        update_cell, clear = table.update_cell, table.clear

        def counting_update(row_key: Any, column_key: Any, value: Any, **kwargs: Any) -> None:
            written.append(str(row_key))
            update_cell(row_key, column_key, value, **kwargs)

        def counting_clear(columns: bool = False) -> Any:
            rebuilt.append(True)
            return clear(columns)

        table.update_cell = counting_update  # type: ignore[method-assign]
        table.clear = counting_clear  # type: ignore[method-assign]
        for grown in (0, 30):
            await _away_and_back(pilot, more, grown, written.clear)
            await settle(pilot)
            assert app.active_screen_name == "pipeline" and table.row_count > 5 and not rebuilt
            assert set(written) == ({"run:r-train"} if grown else set()), f"{grown} grown: {written}"
            row = table.get_row("run:r-train")
            assert f"{more.lines} lines" in row, row


async def test_a_switch_back_renders_only_the_log_lines_not_drawn_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The log view keeps its rendered lines: a switch back to the Pipeline screen renders
    (sanitizes and styles) only the lines that arrived while it was hidden, none when none
    did; every line on screen was rendered again on each paint before."""
    import console.tui.widgets.log_view as pipeline  # the log tail moved there (issue #31)

    async with _pipeline_with_a_long_log() as (app, pilot, log, more):
        rendered: list[str] = []
        original = pipeline.visible

        def counting(text: str) -> str:
            rendered.append(text)
            return original(text)

        monkeypatch.setattr(pipeline, "visible", counting)
        for grown in (0, 5, 0):
            await _away_and_back(pilot, more, grown, rendered.clear)
            await settle(pilot)
            assert app.active_screen_name == "pipeline"
            assert sorted(rendered) == sorted(f"train line {more.lines - k}" for k in range(grown, 0, -1))
            _assert_shows_the_newest(log, more)


async def test_a_log_paint_works_out_its_style_once_and_follows_a_restyle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A paint of the log asks its ancestors for the base style once, not twice per line,
    and the kept lines are never stale: after a theme change every line is drawn in the
    new style."""
    from textual.dom import DOMNode
    from textual.geometry import Region

    async with _pipeline_with_a_long_log() as (app, pilot, log, _more):
        crop = Region(0, 0, log.size.width, log.size.height)
        walks = [0]
        original = DOMNode.rich_style.fget

        def counting(node: Any) -> Any:
            if node is log:
                walks[0] += 1
            return original(node)

        monkeypatch.setattr(DOMNode, "rich_style", property(counting))
        log._styles_cache.clear()  # every line drawn anew, as after a refresh
        log.render_lines(crop)
        assert walks == [1]
        monkeypatch.undo()

        def backgrounds() -> set[object]:
            log._styles_cache.clear()
            inner = [strip for strip in log.render_lines(crop)[1:-1]]  # inside the border
            return {seg.style.bgcolor for strip in inner for seg in strip if seg.style is not None}

        before = backgrounds()
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await settle(pilot)
        after = backgrounds()
        assert log.rich_style.bgcolor in after and not (before & after), (before, after)
