"""The live log tail of the Pipeline screen: renders only the visible lines from a LogTail
(console/tui/tail.py). The engine holds the lines, the widget only maps scroll position to rows;
its own module because scrolling, following and the rendered-strip cache are one concern, the
stage table beside it another."""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.tui.model import JobState
from console.tui.tail import LogTail
from console.tui.widgets.stage_cells import short_run
from remote.spine.sanitize import visible

ERROR_STYLE = Style(color="red")
_KEPT_STRIPS = 512  # rendered log lines kept: several views' worth, a few hundred bytes each


class LogView(ScrollView, can_focus=True):
    """Virtual log: height = number of lines in the tail; render_line reads one line."""

    DEFAULT_CSS = "LogView { height: 1fr; border: round $primary-darken-2; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tail: LogTail | None = None
        self.job: JobState | None = None
        self.follow = True
        self.records = False  # show the stage's `@@eagle3 {json}` records too
        self._seen = -1
        # rendered lines by (text, style, scroll x, width): a few screens of them
        self._strips: LRUCache[tuple[str, Style, int, int], Strip] = LRUCache(_KEPT_STRIPS)
        self._title()

    def show_job(self, job: JobState | None) -> None:
        """A run's log: without its stage records unless the operator asked for them."""
        self.job = job
        tail = None if job is None else (job.tail if self.records else job.text)
        if tail is not self.tail:
            self.tail, self._seen = tail, -1
        self.sync()

    def set_records(self, records: bool) -> None:
        self.records = records
        self.show_job(self.job)

    def _title(self) -> None:
        """The log's state where the eye is: following or paused, records shown or hidden."""
        job = self.job
        name = f"{job.name.removeprefix('pipeline-')} {short_run(job.run_id)}" if job is not None else "log"
        self.border_title = name[:40]
        follow = "following" if self.follow else "paused (end follows)"
        records = ("records shown (l hides)" if self.records
                   else f"{job.tail.total - job.text.total} records hidden (l)" if job is not None
                   else "records hidden (l)")
        self.border_subtitle = f"{follow} · {records}"

    _titled = -1

    def sync(self) -> None:
        tail = self.tail
        job = self.job
        if job is not None and job.tail.version != self._titled:  # records count in the title
            self._titled = job.tail.version
            self._title()
        version = tail.version if tail is not None else -2
        if version == self._seen:
            return
        self._seen = version
        self._title()
        n = len(tail) if tail is not None else 0
        # At least the width beside the vertical scrollbar, from the view's last layout: a
        # width that never changes while lines fit takes the quiet path below. `size` (the
        # region on screen) is 0x0 while the screen is hidden and on the sync that shows it,
        # which flipped the width between the longest line and the view's, so every switch to
        # this screen was followed by a second layout and scroll, and the horizontal
        # scrollbar came and went.
        beside = self.container_size.width - self.styles.scrollbar_size_vertical
        width = max(tail.longest if tail is not None else 0, beside)
        size = Size(width, n)
        if self._scrollbars_stay(size):
            # `virtual_size` is a reactive that re-lays out the whole screen on every change: 4
            # times a second while a job prints, for a log that only grew under scrollbars
            # already shown. Set it quietly and update the scrollbars and the scroll position
            # in place, so the next paint shows the new lines at the end.
            self.set_reactive(LogView.virtual_size, size)
            bar = self.vertical_scrollbar  # shown before and after: only its extent moves
            bar.window_virtual_size = size.height
            bar.window_size = self.container_size.height - self.scrollbar_size_horizontal
            if self.follow:
                self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
        else:
            self.virtual_size = size
            if self.follow:
                self.call_after_refresh(self.scroll_end, animate=False, immediate=True)
        self.refresh()

    def _scrollbars_stay(self, size: Size) -> bool:
        """Whether the log can take `size` without a layout: same width, and taller than the
        view before and after (the vertical scrollbar was shown and stays; the horizontal one
        depends on the width alone)."""
        old = self.virtual_size
        height = self.container_size.height
        return (self.is_mounted and height > 0 and old.width == size.width
                and self.show_vertical_scrollbar and old.height > height and size.height > height)

    def set_follow(self, follow: bool) -> None:
        self.follow = follow
        self._seen = -1
        self.sync()

    def on_mouse_scroll_up(self, event: Any) -> None:
        """The wheel up pauses following (Widget's own handler scrolls: both run)."""
        if self.follow:
            self.follow = False
            self._title()

    def action_scroll_up(self) -> None:
        self.follow = False
        self._title()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.follow = False
        self._title()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.follow = False
        self._title()
        super().action_scroll_home()

    def action_scroll_end(self) -> None:
        """`end` goes back to following the log."""
        self.set_follow(True)

    _paint_style: Style | None = None  # the base style, worked out once per paint

    def render_lines(self, crop: Region) -> list[Strip]:
        """One paint: the base style is worked out once for all its lines. `rich_style` walks
        the ancestors (about ten) merging their colours, and each line asked for it twice:
        profiled, about three quarters of the log's paint. Nothing restyles a widget while
        one of its paints runs (one call), so the style at the start is every line's."""
        self._paint_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._paint_style = None

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width, height = self.scrollable_content_region.size
        tail = self.tail
        base = self._paint_style if self._paint_style is not None else self.rich_style
        # Following: the last lines, whatever the scroll offset has caught up to so far.
        top = tail.tail_start(height) if self.follow and tail is not None else scroll_y
        index = top + y
        if tail is not None and not len(tail) and y == 0 and self.job is not None and self.job.tail.total:
            hint = "(only stage records so far: l shows them)"
            return Strip([Segment(hint, base + Style(dim=True))], len(hint)).crop_extend(0, width, base)
        if tail is None or index >= len(tail):
            return Strip.blank(width, base)
        line = tail.line(index)
        # A line's strip is kept under what it is drawn from: a repaint (each refresh while
        # a job prints moves every line up by the new ones; each switch back) renders only
        # the lines not drawn before, as toolong does.
        key = (line, base, scroll_x, width)
        strip = self._strips.get(key)
        if strip is None:
            strip = self._strips[key] = self._render_text(line, base, scroll_x, width)
        return strip

    @staticmethod
    def _render_text(line: str, base: Style, scroll_x: int, width: int) -> Strip:
        text = visible(line.expandtabs(4))  # the box's escapes drawn, not obeyed
        style = base + ERROR_STYLE if "Traceback" in text or "Error" in text else base
        return Strip([Segment(text, style)], len(text)).crop_extend(scroll_x, scroll_x + width, base)
