"""The screen tabs as one widget: the titles and the active tab's underline, two cached lines.

Textual's `Tabs` is a tree of a dozen widgets (a `Tab` per screen, an `Underline`, two
containers). Each switch moved the `-active` class from one `Tab` to another (a restyle of
that tree), repainted every `Tab` about twice plus the `Underline` and the `Tabs`, and ran
`Tabs.watch_active`: 4-7 ms of a shared core per switch, on the path from the key to the new
screen (#17). Here a switch changes one attribute and repaints one widget once: the two lines
are cached per (width, active tab, focus, hovered tab) and rebuilt only when one of those
changes or the theme does. It looks as `Tabs` did: dim titles, the active one bright, a thin
rule under the bar with the active title's span highlighted, and the block cursor on the
active title while the bar has the keyboard.

The bar only reports what the operator asks for (a click, left/right while it has focus) as
`TabBar.Activated`; the app decides whether to switch and sets `active`, so the bar never
shows a screen that is not shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

# The underline, as Textual's Bar draws it: a heavy rule, half-cells at the highlight's ends.
RULE, LEFT_HALF, RIGHT_HALF = "━", "╺", "╸"
PAD = 1  # a space either side of each title, as Textual's Tab has (padding: 0 1)


@dataclass(frozen=True)
class TabTitle:
    """A tab: the screen it shows, its title, the title drawn under `narrow` columns, and the
    one drawn when even the short titles overflow (nine tabs at 80 columns: the words alone,
    every tab in view, rather than the bar shifted and the first titles cut off)."""

    name: str
    title: str
    short: str
    bare: str = ""


@dataclass(frozen=True)
class _Span:
    name: str
    label: str
    start: int  # first cell of the tab (its left pad), in bar coordinates before any shift
    end: int  # one past its last cell (its right pad)


class TabBar(Widget, can_focus=True):
    """The tab bar: see the module docstring for why it is one widget."""

    DEFAULT_CSS = """
    TabBar { width: 1fr; height: 2; }
    TabBar > .tab-bar--tab { color: $foreground 50%; }
    TabBar > .tab-bar--hover { color: $foreground; }
    TabBar > .tab-bar--active { color: $foreground; }
    TabBar:focus > .tab-bar--active {
        text-style: $block-cursor-text-style;
        color: $block-cursor-foreground;
        background: $block-cursor-background;
    }
    TabBar > .tab-bar--rule { color: $foreground 10%; }
    TabBar:focus > .tab-bar--rule { color: $foreground 30%; }
    TabBar > .tab-bar--underline { color: $block-cursor-background; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "tab-bar--tab", "tab-bar--hover", "tab-bar--active", "tab-bar--rule", "tab-bar--underline",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "move(-1)", "Previous screen", show=False),
        Binding("right", "move(1)", "Next screen", show=False),
    ]
    ALLOW_SELECT = False

    class Activated(Message):
        """The operator chose the tab of screen `name` (a click, or left/right on the bar)."""

        def __init__(self, bar: TabBar, name: str) -> None:
            super().__init__()
            self.bar = bar
            self.name = name

        @property
        def control(self) -> TabBar:
            return self.bar

    def __init__(self, tabs: Sequence[TabTitle], active: str, *, narrow: int = 0,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        if not tabs:
            raise ValueError("a tab bar needs at least one tab")
        names = [t.name for t in tabs]
        if active not in names:
            raise ValueError(f"no tab {active!r} among {', '.join(names)}")
        self._tabs = tuple(tabs)
        self._active = active
        self._narrow = narrow
        self._hover: str | None = None
        self._spans: dict[int, list[_Span]] = {}  # width -> the tabs' spans
        self._lines: dict[tuple[int, str, bool, str | None], tuple[Strip, Strip]] = {}
        self.paints = 0  # lines pairs drawn (not served from the cache): tests and benchmarks

    # -- what the app sets and reads ---------------------------------------------------------------
    @property
    def active(self) -> str:
        return self._active

    @active.setter
    def active(self, name: str) -> None:
        if name not in self.names:
            raise ValueError(f"no tab {name!r} among {', '.join(self.names)}")
        if name != self._active:
            self._active = name
            self.refresh()  # a repaint of these two lines: no class moves, no layout

    @property
    def names(self) -> list[str]:
        return [t.name for t in self._tabs]

    def labels(self, width: int | None = None) -> list[str]:
        """The titles as drawn at `width` (default: the bar's own width)."""
        return [s.label for s in self._layout(self.size.width if width is None else width)[0]]

    def tab_at(self, x: int) -> str | None:
        """The screen whose tab covers column `x` of the bar (either line), if any."""
        spans, shift = self._layout(self.size.width)
        for span in spans:
            if span.start <= x + shift < span.end:
                return span.name
        return None

    def tab_offset(self, name: str) -> int:
        """The column of the first character of `name`'s title (where a click lands on it)."""
        spans, shift = self._layout(self.size.width)
        for span in spans:
            if span.name == name:
                return span.start + PAD - shift
        raise ValueError(f"no tab {name!r} among {', '.join(self.names)}")

    # -- input ---------------------------------------------------------------------------------------
    def action_move(self, step: int) -> None:
        names = self.names
        self.post_message(self.Activated(self, names[(names.index(self._active) + step) % len(names)]))

    def on_click(self, event: events.Click) -> None:
        event.stop()
        name = self.tab_at(event.x)
        if name is not None and name != self._active:
            self.post_message(self.Activated(self, name))

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._set_hover(self.tab_at(event.x))

    def on_leave(self, event: events.Leave) -> None:
        self._set_hover(None)

    def _set_hover(self, name: str | None) -> None:
        if name != self._hover:
            self._hover = name
            self.refresh()

    # -- drawing --------------------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        """A theme or pseudo-class (focus, hover) change: the cached lines hold resolved colours."""
        super().notify_style_update()
        self._lines.clear()

    def _layout(self, width: int) -> tuple[list[_Span], int]:
        """The tabs' spans at `width`, and the shift that keeps the active one in view when they
        do not fit (it is centred, as Textual's Tabs scrolled it)."""
        spans = self._spans.get(width)
        if spans is None:
            narrow = width < self._narrow
            spans = self._spans_of([t.short if narrow else t.title for t in self._tabs])
            if narrow and spans[-1].end > width and all(t.bare for t in self._tabs):
                bare = self._spans_of([t.bare for t in self._tabs])
                spans = bare if bare[-1].end <= width else spans  # else shifted, as before
            if len(self._spans) > 64:  # widths seen while resizing
                self._spans.clear()
            self._spans[width] = spans
        total = spans[-1].end
        if total <= width:
            return spans, 0
        active = next(s for s in spans if s.name == self._active)
        shift = (active.start + active.end) // 2 - width // 2
        return spans, max(0, min(shift, total - width))

    def _spans_of(self, labels: list[str]) -> list[_Span]:
        spans, x = [], 0
        for tab, label in zip(self._tabs, labels, strict=True):
            end = x + cell_len(label) + 2 * PAD
            spans.append(_Span(tab.name, label, x, end))
            x = end
        return spans

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y > 1 or width <= 0:
            return Strip.blank(width)
        key = (width, self._active, self.has_focus, self._hover)
        lines = self._lines.get(key)
        if lines is None:
            if len(self._lines) > 64:  # widths seen while resizing
                self._lines.clear()
            lines = self._lines[key] = self._draw(width)
        return lines[y]

    def _draw(self, width: int) -> tuple[Strip, Strip]:
        self.paints += 1
        style = self.get_component_rich_style
        plain, hover, active = (style("tab-bar--tab"), style("tab-bar--hover"),
                                style("tab-bar--active"))
        spans, shift = self._layout(width)
        pad = " " * PAD
        segments: list[Segment] = []
        highlight = (0, 0)
        for span in spans:
            if span.name == self._active:
                look = active
                highlight = (span.start + PAD - shift, span.end - PAD - shift)
            else:
                look = hover if span.name == self._hover else plain
            # the pads take the title's background (the block cursor's, when focused), not its colour
            pad_style = Style(bgcolor=look.bgcolor) if look.bgcolor else None
            segments += [Segment(pad, pad_style), Segment(span.label, look), Segment(pad, pad_style)]
        # The bar's background (the screen's: the bar has none) is in every cell, as Textual's
        # compositor put it under Tabs; a cell without one would show the terminal's default.
        ground = Style(bgcolor=plain.bgcolor)
        titles = Strip(segments).crop(shift, shift + width).extend_cell_length(width, ground)
        return titles, self._rule(width, *highlight, ground)

    def _rule(self, width: int, start: int, end: int, ground: Style) -> Strip:
        """The line under the titles, cell for cell as Textual's Bar draws it: a rule, with the
        active title's columns [start, end) in the highlight colour and half-cells at its ends."""
        rule = ground + Style(color=self.get_component_rich_style("tab-bar--rule").color)
        lit = ground + Style(color=self.get_component_rich_style("tab-bar--underline").color)
        start, end = max(0, start), min(width, end)
        if end <= start:
            return Strip([Segment(RULE * width, rule)], width)
        segments = [Segment(RULE * max(0, start - 1), rule)]
        if start > 0:
            segments.append(Segment(RIGHT_HALF, rule))
        segments.append(Segment(RULE * (end - start), lit))
        if end < width:
            segments += [Segment(LEFT_HALF, rule), Segment(RULE * (width - end - 1), rule)]
        return Strip(segments, width)
