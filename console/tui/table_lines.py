"""A plain Rich table drawn line by line, without Rich's per-cell rendering.

Rich renders a table cell by cell: it measures each cell, then renders each one as a padded
renderable of its own through the console. For the Overview's 8-GPU table that was 13 ms per
draw, 24 ms with Textual's share (profiled under the day load: a quarter of a core at 10
samples/s, most of the TUI's CPU). The views' tables are simple (no box, single-line cells that
are never wrapped), and for those a line is a sum of padded cells: `FastTable` yields the same
segments Rich would (same column widths by Rich's own rule, same styles, same segment
boundaries, so the screen and its snapshots are unchanged) for a fraction of the work. A table
outside that subset, or too wide for the room it is given, is drawn by Rich itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich._ratio import ratio_distribute
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Column, Table
from rich.text import Text

_PADDING = (0, 1, 0, 1)
_PAD = Segment(" ", Style())


def _as_text(cell: object) -> Text | None:
    if isinstance(cell, Text):
        return cell
    if isinstance(cell, str):
        if "[" not in cell and ":" not in cell:
            return Text(cell)  # what from_markup makes of a str with no markup and no emoji code
        return Text.from_markup(cell)  # what Rich does with a str cell (markup on)
    return None


def simple(table: Table) -> bool:
    """Whether `table` is of the kind FastTable draws itself."""
    return (table.box is None and table.show_header and not table.show_footer
            and table.caption is None and not table.row_styles and table.style in ("", "none")
            and table.padding == _PADDING and table.pad_edge and not table.collapse_padding
            and table.width is None and table.min_width is None and not table.leading
            and isinstance(table.header_style, str)
            and (table.title is None or isinstance(table.title, str))
            and table.title_justify in ("left", "center", "right")
            and all(c.no_wrap and _ratio_ok(table, c) and c.width is None and c.style in ("", "none")
                    and c.min_width is None and c.max_width is None and not c.footer
                    and isinstance(c.header, str) and c.header_style in ("", "none")
                    and c.vertical == "top" and c.justify in ("left", "right")
                    for c in table.columns))


def _ratio_ok(table: Table, column: Column) -> bool:
    """A ratio column is drawn here in an expanded table, when a cell too long for it is cut
    on one line (the Overview's jobs table: the last line takes the room the others leave)."""
    return column.ratio is None or (table.expand and column.ratio > 0
                                    and column.overflow in ("ellipsis", "crop"))


class FastTable:
    """Renders like `table`; line by line when the table is simple and fits."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return self.table.__rich_measure__(console, options)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = self._lines(console, options) if simple(self.table) else None
        if lines is None:
            yield self.table
            return
        for line in lines:
            yield from line
            yield Segment.line()

    def _lines(self, console: Console, options: ConsoleOptions) -> list[list[Segment]] | None:
        table = self.table
        columns = table.columns
        if not columns:
            return None
        cells: list[list[Text]] = []
        for column in columns:
            texts = []
            for cell in column._cells:
                text = _as_text(cell)
                if text is None or "\n" in text.plain or "\t" in text.plain:
                    return None  # several lines, or tabs Rich expands: Rich draws it
                texts.append(text)
            cells.append(texts)
        headers = [Text.from_markup(str(c.header)) for c in columns]
        widths = [max([t.cell_len for t in col] + [h.cell_len]) + 2
                  for col, h in zip(cells, headers, strict=True)]
        max_width = options.max_width
        if any(c.ratio for c in columns):
            # As Rich does: the other columns keep their width, the ratio columns share the rest
            # (at least their padding and one cell each)
            fixed = [0 if c.ratio else w for c, w in zip(columns, widths, strict=True)]
            shares = iter(ratio_distribute(max_width - sum(fixed), [c.ratio for c in columns if c.ratio],
                                           [3 for c in columns if c.ratio]))
            widths = [next(shares) if c.ratio else w for c, w in zip(columns, widths, strict=True)]
        table_width = sum(widths)
        if table_width > max_width:
            return None  # Rich would shrink and crop columns: leave that to Rich
        if table.expand and table_width < max_width:
            widths = [w + pad for w, pad in
                      zip(widths, ratio_distribute(max_width - table_width, widths), strict=True)]
            table_width = max_width
        lines: list[list[Segment]] = []
        if table.title is not None:
            title = Text.from_markup(str(table.title), style=console.get_style("table.title"))
            if "\n" in title.plain or title.cell_len > table_width:
                return None
            lines.extend(console.render_lines(
                # height=None: a height in the options (Textual sets one) would pad the title
                title, options.update(width=table_width, justify=table.title_justify, height=None),
                pad=False))
        header_style = console.get_style(str(table.header_style or ""))
        styles: dict[object, Style | None] = {}
        lines.append(list(Segment.apply_style(
            _row(list(zip(headers, columns, strict=True)), widths, console, styles), header_style)))
        for r in range(len(cells[0])):
            lines.append(list(_row([(col[r], c) for col, c in zip(cells, columns, strict=True)],
                                   widths, console, styles)))
        return lines


def _row(cells: list[tuple[Text, Column]], widths: list[int], console: Console,
         styles: dict[object, Style | None] | None = None) -> Iterable[Segment]:
    """One table line: what Rich's cell-by-cell rendering yields for it.

    Most cells are one style over their whole text (no spans) and fit their column: for those
    the padded cell is Rich's single segment, built here from the plain text and the cell's
    style, parsed once per table (`styles`), instead of copying, padding, joining and
    rendering a Text per cell (most of a paint's time: profiled, see
    benchmarks/tui_table_paint.py). Any other cell goes Rich's way."""
    cache: dict[object, Style | None] = {} if styles is None else styles
    for (cell, column), width in zip(cells, widths, strict=True):
        yield _PAD
        room = width - 2
        length = cell.cell_len
        if not cell._spans and length <= room:
            plain = cell.plain
            padded = (" " * (room - length) + plain if column.justify == "right"
                      else plain + " " * (room - length))
            if not cell.style:
                yield Segment(padded)  # Text.render of a text without spans: no style
            elif padded:
                style = cache.get(cell.style, _UNPARSED)
                if style is _UNPARSED:
                    style = _span_style(cell.style, console)
                    cache[cell.style] = style
                if style is None:
                    yield from _cell_segments(cell, column, room, length, console)
                else:
                    yield Segment(padded, style)
            # a styled empty cell: Rich's one empty span yields no segment
        else:
            yield from _cell_segments(cell, column, room, length, console)
        yield _PAD


_UNPARSED: Style | None = Style(bold=True)  # a marker: never a parsed cell style (compared by identity)


def _span_style(style: str | Style, console: Console) -> Style | None:
    """The style Text.render gives a segment under one span of `style` over the text's null
    base style; None where Rich makes a fresh style each time (a link: new link ids)."""
    null = Style.null()
    combined = Style.combine((console.get_style("", default=null),
                              console.get_style(style, default=null)))
    return None if combined.link else combined


def _cell_segments(cell: Text, column: Column, room: int, length: int, console: Console
                   ) -> Iterable[Segment]:
    # As Rich does: the cell padded to its width in its own style, its base style made a
    # span (Text.render draws spans only; Rich's cell goes through Text.join, which does
    # the same); a cell longer than a ratio column is cut to it first, by the column's overflow.
    padded = cell.copy()
    if length > room:
        padded.truncate(room, overflow=column.overflow)
    elif column.justify == "right":
        padded.pad_left(room - length)
    else:
        padded.pad_right(room - length)
    text = Text(end="")
    text.append_text(padded)
    yield from text.render(console)
