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


def test_quick_table_paints_like_data_table_after_every_change() -> None:
    """The kept lines are never stale: after each change (a cell, a rebuild with the same keys,
    a cursor move, focus, a theme, a width) QuickTable paints what DataTable paints, and an
    unchanged table painted again reuses its lines instead of having DataTable draw them."""
    async def run() -> None:
        async with _running_pair() as (pilot, plain, quick):

            async def same() -> list[list[tuple[str, object]]]:
                await pilot.pause()
                painted = _paint(quick)
                assert painted == _paint(plain)
                return painted

            await same()
            drawn = 0
            original = DataTable.render_line

            def counting(self: DataTable, y: int) -> object:
                nonlocal drawn
                if self is quick:
                    drawn += 1
                return original(self, y)

            DataTable.render_line = counting  # type: ignore[assignment,method-assign]
            try:
                _paint(quick)
                assert drawn == 0  # every line came from the kept lines
                for table in (plain, quick):  # one cell changes: that line alone is drawn
                    table.update_cell_at(Coordinate(2, 1), "changed")
                painted = await same()
                assert drawn == 1 and "changed" in "".join(t for t, _ in painted[3])
            finally:
                DataTable.render_line = original  # type: ignore[method-assign]
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
            for table in (plain, quick):  # scrolled: the rows move under the header
                table.move_cursor(row=25)
            scrolled = await same()
            assert quick.scroll_offset.y > 0 and "label 25" in "".join(t for t, _ in scrolled[-1])
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


def test_set_rows_paints_what_a_rebuild_paints_and_writes_only_what_changed() -> None:
    """`set_rows` against DataTable's clear() and add_row() of every row: the same paint after
    each step (nothing changed; one cell longer than its column; one cell shorter; other
    keys), and with the same keys only the cells that changed are written, none when nothing
    changed (other keys: a rebuild)."""
    async def run() -> None:
        async with _running_pair() as (pilot, plain, quick):
            written: list[object] = []
            rebuilt: list[bool] = []
            update_cell, clear = QuickTable.update_cell, QuickTable.clear

            def counting_update(self: QuickTable, row_key: object, column_key: object, value: object,
                                **kwargs: object) -> None:
                written.append(value)
                update_cell(self, row_key, column_key, value, **kwargs)  # type: ignore[arg-type]

            def counting_clear(self: QuickTable, columns: bool = False) -> QuickTable:
                rebuilt.append(True)
                return clear(self, columns)

            QuickTable.update_cell = counting_update  # type: ignore[method-assign,assignment]
            QuickTable.clear = counting_clear  # type: ignore[method-assign]
            try:
                async def show(rows: list[tuple[str, list[object]]]) -> list[list[tuple[str, object]]]:
                    plain.clear()
                    for key, cells in rows:
                        plain.add_row(*cells, key=key)
                    quick.set_rows(rows)
                    for table in (plain, quick):
                        table.move_cursor(row=2)
                    await pilot.pause()
                    painted = _paint(quick)
                    assert painted == _paint(plain)
                    return painted

                rows: list[tuple[str, list[object]]] = [(f"k{i}", list(row)) for i, row in enumerate(ROWS)]
                await show(rows)
                written.clear()
                rebuilt.clear()
                assert not quick.set_rows(rows)  # the same rows: nothing written
                await show(rows)
                assert written == [] and not rebuilt and quick.row_count == len(ROWS)
                longer = Text("a time far longer than the column", style="bold")
                rows[3] = ("k3", [rows[3][1][0], longer, "stage", "x"])
                painted = await show(rows)
                assert written == [longer, "x"] and not rebuilt  # the changed cells alone
                assert "a time far longer than the column" in "".join(t for t, _ in painted[4])
                written.clear()
                rows[3] = ("k3", [rows[3][1][0], "short", "stage"])  # a missing cell: blank, as add_row
                await show(rows)
                assert written == ["short", None] and not rebuilt
                rows.reverse()  # other keys in that order: a rebuild
                assert quick.set_rows(rows)
                await show(rows)
                assert rebuilt
            finally:
                QuickTable.update_cell = update_cell  # type: ignore[method-assign]
                QuickTable.clear = clear  # type: ignore[method-assign]

    asyncio.run(run())
