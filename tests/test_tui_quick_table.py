"""QuickTable paints exactly what DataTable paints, and its style is never stale between paints."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult
from textual.geometry import Region
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


def _paint(table: DataTable) -> list[list[tuple[str, object]]]:
    crop = Region(0, 0, table.size.width, table.size.height)
    return [[(s.text, s.style) for s in strip] for strip in table.render_lines(crop)]


def test_quick_table_paints_like_data_table_and_follows_restyles() -> None:
    async def run() -> None:
        app = Pair()
        async with app.run_test(size=(80, 30)) as pilot:
            await pilot.pause()
            plain = app.query_one("#plain", DataTable)
            quick = app.query_one("#quick", QuickTable)
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
