"""Pipeline screen: the stages with status and progress bars, and the live log tail of the
selected stage (console/tui/widgets/log_view.py)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import DataTable, Static

from console.tui.model import JOBS, LOG, STAGES, ConsoleState, HostState, JobState, StageState
from console.tui.quiet import set_content, text_shape
from console.tui.render import elide_middle
from console.tui.shown import plain
from console.tui.widgets.charts import Chart, draw_loss
from console.tui.widgets.common import View
from console.tui.widgets.log_view import LogView
from console.tui.widgets.quick_table import QuickTable
from console.tui.widgets.stage_cells import (
    STATUS_STYLE,
    artifacts_line,
    metrics_cell,
    run_label,
    short_run,
    stage_cells,
)

STAGE_KEY = "stage:"
RUN_KEY = "run:"


def _run_row(job: JobState, label: str, status: str) -> tuple[str, list[Any]]:
    return (RUN_KEY + job.run_id, [plain(label), plain(run_label(job), STATUS_STYLE.get(status, "")), "",
                                   f"{job.tail.total} lines", "", "-"])


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
        return self.query_one("#stages", QuickTable).cursor_key

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
        names = host.stage_names()
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
                rows.append(_run_row(job, f" └ {short_run(job.run_id)}",
                                     "running" if job.running else ("done" if job.returncode == 0 else "failed")))
                if job.running and st.status != "running":
                    running_runs.append(RUN_KEY + job.run_id)
        for job in host.jobs.values():
            if job.run_id in shown:
                continue
            label = f"{job.name.removeprefix('pipeline-')} (run)"[:24]
            rows.append(_run_row(job, label, "running" if job.running else "done"))
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
            if self.live:
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
