"""QuickTable paints exactly what DataTable paints, and its style is never stale between paints."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from rich.text import Text
from textual.app import App, ComposeResult
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import DataTable

from console.tui.widgets.quick_table import QuickTable

ROWS = [(str(i), f"12:00:{i:02d}", "stage", f"label {i} " * (i % 4)) for i in range(30)]


class Pair(App[None]):
    AUTO_FOCUS = None  # neither table focused: both paint the blurred cursor
    CSS = "DataTable { height: 12; } .warm { background: red; color: yellow; }"

    def compose(self) -> ComposeResult:
        yield DataTable(id="plain", cursor_type="row")
        yield QuickTable(id="quick", cursor_type="row")

    def on_mount(self) -> None:
        for table in self.query(DataTable):
            table.add_columns("#", "time", "kind", "what")
            for row in ROWS:
                table.add_row(*row)


@asynccontextmanager
async def _running_pair() -> AsyncIterator[tuple[Pilot[None], DataTable, QuickTable]]:
    """The two tables of `Pair`, mounted and laid out."""
    app = Pair()
    async with app.run_test(size=(80, 30)) as pilot:
        await pilot.pause()
        yield pilot, app.query_one("#plain", DataTable), app.query_one("#quick", QuickTable)


def _paint(table: DataTable) -> list[list[tuple[str, object]]]:
    crop = Region(0, 0, table.size.width, table.size.height)
    return [[(s.text, s.style) for s in strip] for strip in table.render_lines(crop)]


def test_quick_table_paints_like_data_table_and_follows_restyles() -> None:
    async def run() -> None:
        async with _running_pair() as (pilot, plain, quick):
            assert plain.size == quick.size and quick.size.height == 12
            for table in (plain, quick):  # same cursor, same focus state
                table.move_cursor(row=3)
            await pilot.pause()
            assert _paint(quick) == _paint(plain)
            assert quick._paint_style is None  # nothing is kept once a paint is over
            before = quick.rich_style
            for table in (plain, quick):
                table.add_class("warm")
            await pilot.pause()
            assert quick.rich_style != before  # a restyle between paints is seen at once
            assert quick.rich_style == plain.rich_style
            painted = _paint(quick)
            assert painted == _paint(plain)
            assert any("label 3" in text for text, _ in painted[4])

    asyncio.run(run())


def test_quick_table_row_cache_follows_every_change() -> None:
    """The kept row lines are never stale: after each change (a cell, a rebuild with the same
    keys, a cursor move, focus, a theme, a width) QuickTable paints what DataTable paints, and
    an unchanged table painted again reuses its rows instead of rendering them anew."""
    async def run() -> None:
        async with _running_pair() as (pilot, plain, quick):

            async def same() -> list[list[tuple[str, object]]]:
                await pilot.pause()
                painted = _paint(quick)
                assert painted == _paint(plain)
                return painted

            await same()
            rendered = 0
            original = DataTable._render_line_in_row

            def counting(self: DataTable, *args: object, **kwargs: object) -> object:
                nonlocal rendered
                if self is quick:
                    rendered += 1
                return original(self, *args, **kwargs)  # type: ignore[arg-type]

            DataTable._render_line_in_row = counting  # type: ignore[assignment,method-assign]
            try:
                quick._clear_caches()  # what a focus change or an update does to DataTable's caches
                _paint(quick)
                assert rendered == 0  # every row came from the kept lines
                for table in (plain, quick):  # one cell changes: that row alone is rendered
                    table.update_cell_at(Coordinate(2, 1), "changed")
                painted = await same()
                assert rendered == 1 and "changed" in "".join(t for t, _ in painted[3])
            finally:
                DataTable._render_line_in_row = original  # type: ignore[method-assign]
            for table in (plain, quick):  # rebuilt with the same keys, other content
                table.clear()
                for i, row in enumerate(reversed(ROWS)):
                    table.add_row(*row, key=f"k{i}")
            first = await same()
            for table in (plain, quick):
                table.clear()
                for i, row in enumerate(ROWS):
                    table.add_row(*row, key=f"k{i}")
            assert await same() != first
            for table in (plain, quick):
                table.update_cell("k4", next(iter(table.columns)), Text("styled", style="bold red"))
            await same()
            for table in (plain, quick):
                table.move_cursor(row=5)
            blurred = await same()
            quick.focus()  # each focused in turn: the focused paints, then the blurred, agree
            await pilot.pause()
            focused = _paint(quick)
            assert focused != blurred
            plain.focus()
            await pilot.pause()
            assert _paint(plain) == focused and _paint(quick) == blurred
            quick.focus()
            await pilot.pause()
            assert _paint(quick) == focused
            pilot.app.set_focus(None)
            pilot.app.theme = "textual-light" if pilot.app.theme != "textual-light" else "nord"
            await same()
            await pilot.resize_terminal(60, 30)
            await same()

    asyncio.run(run())
