"""Pipeline screen: the stages with status and progress bars, and the live log tail of the
selected stage. The log view renders only the visible lines from a LogTail (console/tui/tail.py):
the engine holds the lines, the widget only maps scroll position to rows."""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import DataTable, Static

from console.tui.model import JOBS, LOG, STAGES, ConsoleState, HostState, StageState
from console.tui.render import bar, fmt_num, fmt_seconds
from console.tui.tail import LogTail
from console.tui.widgets.common import View
from remote.sanitize import visible

STATUS_STYLE = {"pending": "dim", "running": "bold yellow", "done": "bold green", "failed": "bold red",
                "skipped": "cyan"}
ERROR_STYLE = Style(color="red")


class LogView(ScrollView, can_focus=True):
    """Virtual log: height = number of lines in the tail; render_line reads one line."""

    DEFAULT_CSS = "LogView { height: 1fr; border: round $primary-darken-2; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tail: LogTail | None = None
        self.follow = True
        self._seen = -1

    def show_tail(self, tail: LogTail | None) -> None:
        if tail is not self.tail:
            self.tail, self._seen = tail, -1
        self.sync()

    def sync(self) -> None:
        tail = self.tail
        version = tail.version if tail is not None else -2
        if version == self._seen:
            return
        self._seen = version
        n = len(tail) if tail is not None else 0
        width = max(tail.longest if tail is not None else 0, self.size.width)
        self.virtual_size = Size(width, n)
        if self.follow:
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True)
        self.refresh()

    def set_follow(self, follow: bool) -> None:
        self.follow = follow
        self._seen = -1
        self.sync()

    def _on_mouse_scroll_up(self, event: Any) -> None:
        self.follow = False

    def action_scroll_up(self) -> None:
        self.follow = False
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.follow = False
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.follow = False
        super().action_scroll_home()

    def action_scroll_end(self) -> None:
        """`end` goes back to following the log."""
        self.set_follow(True)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width, height = self.scrollable_content_region.size
        tail = self.tail
        # Following: the last lines, whatever the scroll offset has caught up to so far.
        top = tail.tail_start(height) if self.follow and tail is not None else scroll_y
        index = top + y
        if tail is None or index >= len(tail):
            return Strip.blank(width, self.rich_style)
        text = visible(tail.line(index).expandtabs(4))  # the box's escapes drawn, not obeyed
        style = self.rich_style
        if "Traceback" in text or "Error" in text:
            style = style + ERROR_STYLE
        return Strip([Segment(text, style)], len(text)).crop_extend(scroll_x, scroll_x + width, self.rich_style)


def stage_cells(st: StageState, width: int = 20) -> tuple[Text, Text, str, str]:
    status = Text(st.status, style=STATUS_STYLE.get(st.status, ""))
    frac = st.fraction
    progress = Text(bar(frac, width), style="green" if st.status == "done" else "yellow")
    if frac is not None:
        progress.append(f" {frac * 100:5.1f}%")
    detail = f"{fmt_num(st.done, 0)}/{fmt_num(st.total, 0) if st.total else '?'} {st.unit}".strip()
    if st.rate:
        detail += f"  {fmt_num(st.rate)} {st.unit}/s"
    if st.status == "skipped":
        detail = st.reason or "skipped"
    return status, progress, detail, fmt_seconds(st.seconds)


class PipelineView(View):
    DOMAINS = (STAGES, LOG, JOBS)

    def compose(self) -> ComposeResult:
        yield DataTable(id="stages", cursor_type="row")
        yield Static(id="artifacts")
        yield LogView(id="log")

    def on_mount(self) -> None:
        self._host: HostState | None = None
        self.query_one("#stages", DataTable).add_columns("stage", "status", "progress", "detail", "time")

    @property
    def selected_stage(self) -> str | None:
        table = self.query_one("#stages", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return str(key.value) if key.value else None

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        self._host = host
        if domains == {LOG}:  # the hot path: a job printing lines
            self.query_one(LogView).sync()
            return
        if not domains or STAGES in domains or JOBS in domains:
            table = self.query_one("#stages", DataTable)
            cursor = table.cursor_row
            stages = host.ordered_stages()
            table.clear()
            for st in stages:
                table.add_row(st.name, *stage_cells(st), key=st.name)
            for job in host.jobs_without_stage():
                status = Text(job.state, style=STATUS_STYLE.get("running" if job.running else "done", ""))
                table.add_row(f"{job.name} (run)", status, "", f"{job.tail.total} lines", "-",
                              key=f"job:{job.run_id}")
            if table.row_count:
                # follow the running stage unless the operator moved the cursor
                running = [i for i, s in enumerate(stages) if s.status == "running"]
                if not running and not stages:
                    running = [i for i, j in enumerate(host.jobs_without_stage()) if j.running]
                row = running[-1] if running and not self._user_moved else cursor
                table.move_cursor(row=min(row, table.row_count - 1))
        self.show_selected()

    _user_moved = False
    _artifacts = ""

    def show_selected(self) -> None:
        host = self._host
        name = self.selected_stage
        log = self.query_one(LogView)
        if host is None or name is None:
            log.show_tail(None)
            return
        job = host.job_for_stage(name)
        st = host.stages.get(name)
        text = Text()
        if job is not None:
            text.append(f"run {job.run_id}  ", style="bold")
            text.append(f"{job.state}" + (f" rc={job.returncode}" if job.returncode is not None else ""))
            text.append(f"  {job.tail.total} lines  log {job.log_path or '-'}", style="dim")
        if st is not None and st.outputs:
            outs = st.outputs if isinstance(st.outputs, list) else [st.outputs]
            text.append("\nartifacts: ", style="bold")
            text.append(", ".join(str(o.get("path", o)) if isinstance(o, dict) else str(o) for o in outs)[:300])
        if text.plain != self._artifacts:  # a Static update re-lays out; skip it when unchanged
            self._artifacts = text.plain
            self.query_one("#artifacts", Static).update(text)
        log.show_tail(job.tail if job is not None else None)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self._host is not None:
            self.show_selected()

    def on_key(self, event: Any) -> None:
        if event.key in ("up", "down", "pageup", "pagedown"):
            self._user_moved = True
