"""A DataTable that works out its base style once per paint, not once per line.

Textual's DataTable asks for `rich_style` on every line it draws, and that property walks
the widget's ancestors (about ten up to the screen) merging their colours each time. A
table is repainted whole after a screen switch or a focus change (focus restyles it and
clears its caches), so the markers or stages table paid that walk per visible row: profiled
under the day load, the walk was about a quarter of the markers table's paint. Nothing can
restyle a widget while one of its paints runs (styles change between messages, and a paint
is one call), so the style worked out at the paint's start is the style of every line.
"""

from __future__ import annotations

from rich.style import Style
from textual.dom import DOMNode
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable


class QuickTable(DataTable):  # type: ignore[type-arg]
    _paint_style: Style | None = None

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
