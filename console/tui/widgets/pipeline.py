"""Pipeline screen: the stages with status and progress bars, and the live log tail of the
selected stage. The log view renders only the visible lines from a LogTail (console/tui/tail.py):
the engine holds the lines, the widget only maps scroll position to rows."""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.cache import LRUCache
from textual.containers import Horizontal
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import DataTable, Static

from console.tui.model import JOBS, LOG, STAGE_ORDER, STAGES, ConsoleState, HostState, JobState, StageState
from console.tui.quiet import set_content, text_shape
from console.tui.render import elide_middle
from console.tui.shown import plain
from console.tui.tail import LogTail
from console.tui.widgets.charts import Chart, draw_loss
from console.tui.widgets.common import View
from console.tui.widgets.quick_table import QuickTable
from console.tui.widgets.stage_cells import (
    STATUS_STYLE,
    artifacts_line,
    metrics_cell,
    run_label,
    short_run,
    stage_cells,
)
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
        self.show_tail(None if job is None else (job.tail if self.records else job.text))

    def set_records(self, records: bool) -> None:
        self.records = records
        self.show_job(self.job)

    def show_tail(self, tail: LogTail | None) -> None:
        if tail is not self.tail:
            self.tail, self._seen = tail, -1
        self.sync()

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
            self._scroll_update(size)
            self._scrolled_for = self._scroll_key()
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

    _scrolled_for: tuple[object, ...] | None = None  # what the scrollbars were last set for

    def _scroll_key(self) -> tuple[object, ...]:
        styles = self.styles
        return (self._size, self.virtual_size, styles.scrollbar_size_vertical,
                styles.scrollbar_size_horizontal)

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size,
                      layout: bool = True) -> bool:
        """A layout that leaves the log's size and its own virtual size as they were leaves its
        scrollbars as they were. ScrollView compares its virtual size with the one the layout
        computes, which for a line-API view never matches, so every layout (each switch to
        this screen) refreshed the vertical scrollbar after the layout had painted it: a
        second screen update of the whole view a frame after the switch."""
        if (self._scrolled_for == (size, *self._scroll_key()[1:])
                and container_size == self._container_size):
            return False
        changed = super()._size_updated(size, virtual_size, container_size, layout)
        self._scrolled_for = self._scroll_key()
        return changed

    def set_follow(self, follow: bool) -> None:
        self.follow = follow
        self._seen = -1
        self.sync()

    def _on_mouse_scroll_up(self, event: Any) -> None:
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


STAGE_KEY = "stage:"
RUN_KEY = "run:"


class PipelineView(View):
    """One row per stage (the five pipeline stages, pending until they run, then any other the
    box reports, e.g. demo-setup) with its runs under it; runs no stage claims come last.
    Rows are keyed by identity (`stage:<name>`, `run:<run_id>`), so the selection stays on the
    same stage or run when rows are inserted above it."""

    DOMAINS = (STAGES, LOG, JOBS)

    def compose(self) -> ComposeResult:
        yield QuickTable(id="stages", cursor_type="row")
        yield Static(id="artifacts")
        with Horizontal(id="log-row"):  # the loss curve beside the log once training reports it
            yield LogView(id="log")
            yield Chart("Training loss per step", id="chart-loss")

    def on_mount(self) -> None:
        self._host: HostState | None = None
        self._selected_key: str | None = None
        self._user_moved = False
        self._artifacts = ""
        self._narrow = self.app.size.width < 100
        table = self.query_one("#stages", DataTable)
        if self._narrow:
            table.add_columns("stage", "status", "progress", "detail", "metrics")
        else:
            table.add_columns("stage", "status", "progress", "detail", "metrics", "time")

    @property
    def selected_key(self) -> str | None:
        table = self.query_one("#stages", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return str(key.value) if key.value else None

    @property
    def selected_stage(self) -> str | None:
        """The stage of the selected row (a run row: the stage it belongs to, if any)."""
        key = self.selected_key
        if key is None:
            return None
        if key.startswith(STAGE_KEY):
            return key[len(STAGE_KEY):]
        if self._host is not None:
            return self._host.stage_of_run(key[len(RUN_KEY):])
        return None

    @property
    def selected_run(self) -> str | None:
        """The run the selection shows: a run row's own, or a stage's latest run."""
        key = self.selected_key
        if key is None or self._host is None:
            return None
        if key.startswith(RUN_KEY):
            return key[len(RUN_KEY):]
        job = self._host.job_for_stage(key[len(STAGE_KEY):])
        return job.run_id if job is not None else None

    def _rows(self, host: HostState) -> tuple[list[tuple[str, list[Any]]], list[str]]:
        """The table's rows (key, cells), and the keys of what is running (stages first)."""
        names = list(STAGE_ORDER) + [n for n in host.stages if n not in STAGE_ORDER]
        width = 8 if self._narrow else 16
        rows: list[tuple[str, list[Any]]] = []
        running: list[str] = []
        running_runs: list[str] = []
        shown: set[str] = set()
        for name in names:
            st = host.stages.get(name) or StageState(name)
            status, progress, detail, seconds = stage_cells(st, width)
            if self._narrow:
                detail = detail.split("  ")[0]  # done/total; the rate goes first
            metrics = metrics_cell(st, self._narrow)
            rows.append((STAGE_KEY + name, [plain(name), status, progress, detail, metrics, seconds]))
            if st.status == "running":
                running.append(STAGE_KEY + name)
            for job in host.stage_runs(name):
                if job.run_id in shown:
                    continue
                shown.add(job.run_id)
                style = STATUS_STYLE.get("running" if job.running else
                                         ("done" if job.returncode == 0 else "failed"), "")
                rows.append((RUN_KEY + job.run_id, [plain(f" └ {short_run(job.run_id)}"), plain(run_label(job), style),
                                                    "", f"{job.tail.total} lines", "", "-"]))
                if job.running and st.status != "running":
                    running_runs.append(RUN_KEY + job.run_id)
        for job in host.jobs.values():
            if job.run_id in shown:
                continue
            style = STATUS_STYLE.get("running" if job.running else "done", "")
            label = f"{job.name.removeprefix('pipeline-')} (run)"[:24]
            rows.append((RUN_KEY + job.run_id, [plain(label), plain(run_label(job), style), "",
                                                f"{job.tail.total} lines", "", "-"]))
            if job.running:
                running_runs.append(RUN_KEY + job.run_id)
        if self._narrow:
            rows = [(k, cells[:5]) for k, cells in rows]
        return rows, running + running_runs

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        if self._host is not None and host is not self._host:
            self._selected_key, self._user_moved = None, False  # another host: its own rows
        self._host = host
        if domains == {LOG}:  # the hot path: a job printing lines
            self.query_one(LogView).sync()
            return
        if not domains or STAGES in domains:
            chart = self.query_one("#chart-loss", Chart)
            shown = draw_loss(chart, host)
            if chart.display != shown:
                chart.display = shown
        if not domains or STAGES in domains or JOBS in domains:
            table = self.query_one("#stages", QuickTable)
            rows, running = self._rows(host)
            keys = [k for k, _ in rows]
            wanted = self._selected_key if self._user_moved else None
            if wanted not in keys:
                # follow the running stage (or run) until the operator moves the cursor
                wanted = running[-1] if running else (self._selected_key if self._selected_key in keys
                                                      else None)
            # Shown again, most rows are as they were (a running stage's progress and its
            # run's line count change): only those cells are written, not the whole table.
            table.set_rows(rows)
            row = keys.index(wanted) if wanted in keys else 0
            table.move_cursor(row=row)
            self._selected_key = keys[row] if keys else None
        self.show_selected()

    def show_selected(self) -> None:
        host = self._host
        log = self.query_one(LogView)
        run_id = self.selected_run
        name = self.selected_stage
        job = host.jobs.get(run_id) if host is not None and run_id else None
        st = host.stages.get(name) if host is not None and name else None
        text = Text()
        run = host.pipeline_run if host is not None else {}
        if run:
            box_job = host.jobs.get(run["run_id"]) if host is not None else None
            state = box_job.state if box_job is not None else run.get("state", "running")
            text.append(f"pipeline run {short_run(run['run_id'])} {run['how']}: {state} on the "
                        "box", style="bold")
            text.append(" (the box carries it through evaluate; quitting leaves it going)\n"
                        if state == "running" else "\n", style="dim")
        if job is not None:
            text.append(f"run {short_run(job.run_id)}  ", style="bold")
            text.append(f"{job.state}" + (f" rc={job.returncode}" if job.returncode is not None else ""))
            text.append(f"  {job.tail.total} lines", style="dim")
            if not self._narrow:  # the box's own copy of the whole log, its ends kept
                room = max(20, self.app.size.width - text.cell_len - 10)
                text.append(f"  log {elide_middle(job.log_path or '-', room)}", style="dim")
        elif st is not None and st.completed:
            text.append(f"{name}: done {st.completed} (from its manifest on the box)", style="dim")
        elif st is not None and st.status == "not run":
            text.append(f"{name}: not run: {st.reason}", style="dim")
        elif name is not None:
            text.append(f"{name}: no run yet", style="dim")
            if self.app_mode() == "live":
                text.append(" (s starts it, u resumes the pipeline)", style="dim")
        if st is not None and st.outputs:
            outs = st.outputs if isinstance(st.outputs, list) else [st.outputs]
            text.append("\nartifacts: ", style="bold")
            text.append(artifacts_line(outs, self.app.size.width - 14))
        if text.plain != self._artifacts:  # a Static update re-lays out; skip it when unchanged
            self._artifacts = text.plain
            # the line count changes 4 times a second while a job prints: a layout only when
            # the text's height may change
            set_content(self.query_one("#artifacts", Static), lambda: text,
                        shape=text_shape(text.plain, self.app.size.width))
        log.show_job(job)

    def app_mode(self) -> str:
        return str(getattr(self.app, "mode", "live"))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Read the cursor as it is now (a highlight posted before a rebuild is stale): a row
        other than the one the view put the cursor on is the operator's choice."""
        if self._host is None:
            return
        key = self.selected_key
        if key is not None and key != self._selected_key:
            self._selected_key = key
            self._user_moved = True
        self.show_selected()
