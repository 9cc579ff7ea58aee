"""A DataTable that works out its base style once per paint, not once per line, and keeps a
row's rendered line while the row's content has not changed.

Textual's DataTable asks for `rich_style` on every line it draws, and that property walks
the widget's ancestors (about ten up to the screen) merging their colours each time. A
table is repainted whole after a screen switch or a focus change (focus restyles it and
clears its caches), so the markers or stages table paid that walk per visible row: profiled
under the day load, the walk was about a quarter of the markers table's paint. Nothing can
restyle a widget while one of its paints runs (styles change between messages, and a paint
is one call), so the style worked out at the paint's start is the style of every line.

DataTable keys every render cache on one table-wide update counter, and drops them all on a
focus change: one changed cell (the stages table's "N lines" of a printing run, 4 times a
second) or a screen switch (the table is focused on show) re-renders every cell of every row,
the slowest part of switching to the Pipeline screen (profiled: 13-15 ms a switch). Here a
row's rendered line is kept under what it is made from instead: the row's own cells, its
index, the columns (labels and widths), the styles it is drawn with (base style, focus and
the other pseudo-classes, the theme) and whether the cursor or the mouse is on it. A switch
back to an unchanged table, or a change to one row, renders only what changed.

`set_rows` shows a list of keyed rows: when the keys are those already shown, in the same
order, it writes only the cells that differ (and nothing at all when none does) instead of
clearing and adding every row. A view tells its table everything on each show and each
refresh, and a rebuild re-measures every cell of every row for the column widths (the stages
table, rebuilt on every switch to the Pipeline screen) and repaints the whole table.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import zip_longest
from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.dom import DOMNode
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

SegmentLines = list[list[Segment]]  # a row's lines as DataTable draws them
_ROW_LINES = 1024  # rows × focus states × cursor positions kept; a row is a few hundred bytes


def cell_signature(cell: object) -> Hashable:
    """What a cell draws as, hashable: a Text by its text, style and spans; a str as is."""
    if isinstance(cell, Text):
        return ("T", cell.plain, str(cell.style), tuple(cell.spans), cell.justify, cell.overflow,
                cell.no_wrap, cell.end)
    if isinstance(cell, (str, int, float)) or cell is None:
        return cell
    return ("id", id(cell))  # another renderable: itself (kept alive by the table's data)


class QuickTable(DataTable):  # type: ignore[type-arg]
    _paint_style: Style | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._row_lines: LRUCache[Hashable, tuple[SegmentLines, SegmentLines]] = LRUCache(_ROW_LINES)
        self._signatures: dict[RowKey, Hashable] = {}
        self._signed_at = -1  # the update count the signatures were taken at

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
        try:
            return super().render_lines(crop)
        finally:
            self._paint_style = None

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
        are written, and their rows measured for the column widths as add_row's are (a width
        only grows, as across a rebuild); the cursor and scroll position stay."""
        columns = self.ordered_columns
        if ([row.key.value for row in self.ordered_rows] != [key for key, _ in rows]
                or any(len(cells) > len(columns) for _, cells in rows)):
            self.clear()
            for key, cells in rows:
                self.add_row(*cells, key=key)
            return True
        changed: list[RowKey] = []
        for key, cells in rows:
            row_key = RowKey(key)
            data = self._data[row_key]
            differs = False
            for column, cell in zip_longest(columns, cells):  # add_row's missing cells: None
                if cell_signature(data.get(column.key)) != cell_signature(cell):
                    data[column.key] = cell
                    differs = True
            if differs:
                changed.append(row_key)
        if not changed:
            return False
        self._new_rows.update(changed)
        self._require_update_dimensions = True
        self._update_count += 1  # DataTable's own caches are keyed on it
        self.refresh()
        self.check_idle()
        return True

    def _row_signature(self, row_key: RowKey) -> Hashable:
        """The row's content (the header's: the column labels); taken once per table update."""
        if self._signed_at != self._update_count:
            self._signatures.clear()
            self._signed_at = self._update_count
        signature = self._signatures.get(row_key)
        if signature is None:
            if row_key is self._header_row_key:
                signature = ("header",)
            else:
                data = self._data.get(row_key, {})
                row = self.rows.get(row_key)
                signature = (tuple(cell_signature(data.get(c.key)) for c in self.ordered_columns),
                             cell_signature(row.label) if row is not None else None,
                             row.height if row is not None else 0)
            self._signatures[row_key] = signature
        return signature

    def _render_line_in_row(self, row_key: RowKey, line_no: int, base_style: Style,
                            cursor_location: Coordinate,
                            hover_location: Coordinate) -> tuple[SegmentLines, SegmentLines]:
        located = self._row_locations.get(row_key)
        row_index = located if located is not None else -1
        cursor_type = self.cursor_type
        if cursor_type == "row":  # a row cursor draws a row by whether it is on it
            cursor: Hashable = cursor_location.row == row_index
            hover: Hashable = hover_location.row == row_index
        else:
            cursor, hover = cursor_location, hover_location
        columns = tuple((str(c.key.value), cell_signature(c.label), c.get_render_width(self))
                        for c in self.ordered_columns)
        key = (row_key.value, row_index, line_no, self._row_signature(row_key), columns, base_style,
               cursor, hover, cursor_type, self.show_cursor, self._show_hover_cursor,
               self._pseudo_class_state, self.size.width, self.fixed_rows, self.fixed_columns,
               self.zebra_stripes, self.show_row_labels, self._row_label_column_width,
               self.cell_padding, self.app.theme, self.app.ansi_color)
        lines = self._row_lines.get(key)
        if lines is None:
            lines = super()._render_line_in_row(row_key, line_no, base_style, cursor_location,
                                                hover_location)
            self._row_lines[key] = lines
        return lines
