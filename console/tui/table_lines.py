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

import math
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Column, Table
from rich.text import Text
from textual.css.styles import RulesMap
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.visual import RenderOptions, RichVisual, Visual
from textual.widget import Widget

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


def _shares(total: int, weights: list[int], floors: list[int] | None = None) -> list[int]:
    """`total` split by `weights` as Rich splits a table's width between its columns: left to
    right, each share the rounded-up part of what is left, at least its floor (a weight whose
    floor is 0 gets no share of its own). Rich's own split is private (rich._ratio), so the
    rule is kept here; the table tests compare the lines with Rich's."""
    floors = floors if floors is not None else [0] * len(weights)
    weights = [w if floor else 0 for w, floor in zip(weights, floors, strict=True)] if any(floors) else weights
    left = sum(weights)
    shares: list[int] = []
    for weight, floor in zip(weights, floors, strict=True):
        share = max(floor, math.ceil(weight * total / left)) if left > 0 else total
        shares.append(share)
        left -= weight
        total -= share
    return shares


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
        lines = self.lines(console, options) if simple(self.table) else None
        if lines is None:
            yield self.table
            return
        for line in lines:
            yield from line
            yield Segment.line()

    def lines(self, console: Console, options: ConsoleOptions) -> list[list[Segment]] | None:
        table = self.table
        columns = table.columns
        if not columns:
            return None
        cells: list[list[Text]] = []
        for column in columns:
            texts = []
            for cell in column.cells:
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
            shares = iter(_shares(max_width - sum(fixed), [c.ratio for c in columns if c.ratio],
                                  [3 for c in columns if c.ratio]))
            widths = [next(shares) if c.ratio else w for c, w in zip(columns, widths, strict=True)]
        table_width = sum(widths)
        if table_width > max_width:
            return None  # Rich would shrink and crop columns: leave that to Rich
        if table.expand and table_width < max_width:
            widths = [w + pad for w, pad in
                      zip(widths, _shares(max_width - table_width, widths), strict=True)]
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
        if not cell.spans and length <= room:
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


class TableVisual(Visual):
    """A view block (Texts and FastTables, as a Group of them would draw) painted as Textual
    strips straight from FastTable's lines.

    A Rich renderable reaches the screen through RichVisual: the whole block rendered again
    through Rich's nested generators, every segment restyled by the widget's _Styled, then cut
    back into lines by split_and_crop_lines, and once more only to count the lines for the
    height. Profiled on a switch under the day load, that was about two thirds of a Stats or
    Overview Static's paint, FastTable's own line building one third. Here the lines are built
    once per width and given the same base and link styles, segment for segment, as _Styled
    and split_and_crop_lines give them (tests/console/tui/test_tui_table_paint.py compares the two). A
    block FastTable does not draw itself is drawn by RichVisual, as before."""

    def __init__(self, widget: Widget, *parts: Text | FastTable) -> None:
        self._widget = widget
        self._parts = parts
        self._group = Group(*parts)
        self._rich = RichVisual(widget, self._group)
        self._lines: tuple[int, list[list[Segment]] | None] | None = None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self._group  # printed outside the app (a test's plain text): the Group it draws

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self._group)

    def _lines_at(self, width: int) -> list[list[Segment]] | None:
        if self._lines is not None and self._lines[0] == width:
            return self._lines[1]
        app = self._widget.app
        console = app.console
        options = app.console_options.update(highlight=False, width=width, height=None)
        lines: list[list[Segment]] | None = []
        for part in self._parts:
            if isinstance(part, FastTable):
                drawn = part.lines(console, options) if simple(part.table) else None
                if drawn is None:
                    lines = None
                    break
                lines.extend(drawn)  # type: ignore[union-attr]
            else:
                lines.extend(console.render_lines(part, options, pad=False))  # type: ignore[union-attr]
        self._lines = (width, lines)
        return lines

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return self._rich.get_optimal_width(rules, container_width)

    def get_height(self, rules: RulesMap, width: int) -> int:
        lines = self._lines_at(width)
        return self._rich.get_height(rules, width) if lines is None else len(lines)

    def render_strips(self, width: int, height: int | None, style: VisualStyle,
                      options: RenderOptions) -> list[Strip]:
        lines = self._lines_at(width)
        if lines is None:
            return self._rich.render_strips(width, height, style, options)
        widget = self._widget
        base = widget.app.console.get_style(style.rich_style)
        link = widget.link_style if widget.auto_links else None
        strips = []
        added: dict[Style | None, Style] = {}  # base + a segment's style: a few styles per block
        for line in lines[:height]:
            segments = []
            for text, seg_style, control in line:
                if base:  # as _Styled: the widget's style under each segment's, control dropped
                    combined = added.get(seg_style)
                    if combined is None:
                        combined = base + seg_style
                        if not combined.link:  # a link is a fresh style (new id) each time
                            added[seg_style] = combined
                    seg_style, control = combined, None
                if link:
                    if seg_style is None:
                        continue
                    if "@click" in seg_style.meta:
                        seg_style = seg_style + link
                if text:  # as split_and_crop_lines(pad=False): empty segments dropped
                    segments.append(Segment(text, seg_style, control))
            strips.append(Strip(Segment.adjust_line_length(segments, width, pad=False)))
        return strips
