"""A DataTable that works out its base style once per paint, not once per line, keeps a painted
line while what it is drawn from is unchanged, and writes only the cells that changed when it
is shown the same rows again. Public DataTable API only (issue #40).

Textual's DataTable asks for `rich_style` on every line it draws, and that property walks
the widget's ancestors (about ten up to the screen) merging their colours each time. A
table is repainted whole after a screen switch or a focus change (focus restyles it and
clears its caches), so the markers or stages table paid that walk per visible row: profiled
under the day load, the walk was about a quarter of the markers table's paint. Nothing can
restyle a widget while one of its paints runs (styles change between messages, and a paint
is one call), so the style worked out at the paint's start is the style of every line.

`set_rows` shows a list of keyed rows: when the keys are those already shown, in the same
order, it writes only the cells that differ (and nothing at all when none does) instead of
clearing and adding every row. A view tells its table everything on each show and each
refresh, and a rebuild re-measures every cell of every row for the column widths (the stages
table, rebuilt on every switch to the Pipeline screen) and repaints the whole table.

DataTable keys every render cache on one table-wide update counter, and drops them all on a
focus change: one changed cell (the stages table's "N lines" of a printing run, 4 times a
second) or a screen switch (the table is focused on show) re-renders every cell of every row,
the slowest part of switching to the Pipeline screen. Here a painted line is kept under what
it is made from instead, read through DataTable's public API (`render_line`, `get_row`,
`ordered_rows`, the columns, the cursor): the row's cells, its index, the columns (labels and
widths), the styles it is drawn with (base style, focus, classes, the theme), the scroll
position and width, and whether the cursor is on it. A switch back to an unchanged table, or a
change to one row, renders only what changed. A table outside that simple shape (fixed rows,
rows taller than a line, row labels) or under the mouse (hover) is drawn by DataTable alone.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import zip_longest
from typing import Any

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.dom import DOMNode
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable


def cell_signature(cell: object) -> Hashable:
    """What a cell draws as, hashable: a Text by its text, style and spans; a str as is."""
    if isinstance(cell, Text):
        return ("T", cell.plain, str(cell.style), tuple(cell.spans), cell.justify, cell.overflow,
                cell.no_wrap, cell.end)
    if isinstance(cell, (str, int, float)) or cell is None:
        return cell
    return ("id", id(cell))  # another renderable: itself (kept alive by the table's data)


_KEPT_LINES = 1024  # painted lines kept: rows x focus states x cursor positions, ~ 200 B each


def cell_width(cell: object) -> int | None:
    """The width DataTable measures a one-line text cell at (a str is markup, as its default
    formatter reads it; None is drawn empty); None for any other cell, which DataTable measures
    itself."""
    if cell is None:
        return 0
    if isinstance(cell, str):
        cell = Text.from_markup(cell, end="")
    if isinstance(cell, Text):
        return max(cell_len(line) for line in cell.plain.split("\n"))
    return None


class QuickTable(DataTable):  # type: ignore[type-arg]
    _paint_style: Style | None = None
    # What every line of the paint under way shares (None: DataTable draws each line itself)
    _paint_key: tuple[Hashable, ...] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kept: LRUCache[Hashable, Strip] = LRUCache(_KEPT_LINES)

    @property
    def rich_style(self) -> Style:
        style = self._paint_style
        if style is not None:
            return style
        computed: Style = DOMNode.rich_style.fget(self)  # type: ignore[attr-defined]
        return computed

    def render_lines(self, crop: Region) -> list[Strip]:
        self._paint_style = None
        self._paint_style = self.rich_style
        self._paint_key = self._shared_key(self._paint_style)
        try:
            return super().render_lines(crop)
        finally:
            self._paint_style = self._paint_key = None

    def _shared_key(self, base: Style) -> tuple[Hashable, ...] | None:
        """What every line of this paint is drawn with, or None for a table whose lines
        DataTable alone can say (fixed rows, taller rows, row labels, the mouse over it)."""
        rows = self.ordered_rows
        if (self.fixed_rows or self.is_mouse_over or (self.show_header and self.header_height != 1)
                or any(row.height != 1 or row.label is not None for row in rows)):
            return None
        columns = tuple((str(c.key.value), cell_signature(c.label), c.get_render_width(self))
                        for c in self.ordered_columns)
        return (columns, base, self.has_focus, self.disabled, tuple(sorted(self.classes)),
                self.app.theme, self.app.ansi_color, self.scroll_offset, self.size.width,
                self.cursor_type, self.show_cursor, self.show_header, self.zebra_stripes,
                self.fixed_columns, self.show_row_labels, self.cell_padding, len(rows))

    def render_line(self, y: int) -> Strip:
        shared = self._paint_key
        if shared is None:
            return super().render_line(y)
        cursor, hover = self.cursor_coordinate, self.hover_coordinate
        header = 1 if self.show_header else 0
        if y < header:  # the header stays where it is; the rows scroll under it
            key: Hashable = ("header", shared, cursor, hover)
        else:
            index = y - header + self.scroll_offset.y
            rows = self.ordered_rows
            if index >= len(rows):
                return super().render_line(y)
            row = rows[index]
            cells = tuple(cell_signature(cell) for cell in self.get_row(row.key))
            if self.cursor_type == "row":  # a row cursor draws a row by whether it is on it
                on: Hashable = (cursor.row == index, hover.row == index)
            else:
                on = (cursor, hover)
            key = (row.key.value, index, cells, on, shared)
        strip = self._kept.get(key)
        if strip is None:
            strip = self._kept[key] = super().render_line(y)
        return strip

    @property
    def cursor_key(self) -> str | None:
        """The key of the row under the cursor; None for an empty table (or a row added
        without a key)."""
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return str(key.value) if key.value else None

    def set_rows(self, rows: Sequence[tuple[str, Sequence[Any]]]) -> bool:
        """Show `rows` (key, cells), as `clear()` and `add_row(*cells, key=key)` for each would;
        whether anything changed. The same keys in the same order: only the cells that differ
        are written (`update_cell`), a column widened for a cell wider than it (a width only
        grows, as across a rebuild); the cursor and scroll position stay."""
        columns = self.ordered_columns
        if ([row.key.value for row in self.ordered_rows] != [key for key, _ in rows]
                or any(len(cells) > len(columns) for _, cells in rows)):
            self.clear()
            for key, cells in rows:
                self.add_row(*cells, key=key)
            return True
        changed = False
        for key, cells in rows:
            for column, old, cell in zip_longest(columns, self.get_row(key), cells):
                if cell_signature(old) == cell_signature(cell):
                    continue
                # A column only widens, as across clear() and add_row(); DataTable measures
                # the whole column again when told to fit a narrower cell.
                width = cell_width(cell)
                self.update_cell(key, column.key, cell,
                                 update_width=width is None or width > column.content_width)
                changed = True
        if changed:
            self.check_idle()  # DataTable takes the new widths when idle, as add_row asks
        return changed
