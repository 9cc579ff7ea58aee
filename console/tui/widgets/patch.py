"""Patch screen: files the patcher knows about, their recipes (applies or why not) and the diff."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from console.tui.model import PATCH, ConsoleState, HostState
from console.tui.shown import plain
from console.tui.widgets.common import View
from console.tui.widgets.quick_table import QuickTable
from remote.spine.sanitize import visible_lines

STATUS_STYLE = {"planned": "cyan", "applied": "yellow", "verified": "bold green", "rolled_back": "magenta",
                "drift": "bold red"}


class PatchView(View):
    DOMAINS = (PATCH,)

    def compose(self) -> ComposeResult:
        # the files table spans the width: path, status and sha256 are never cut off
        yield QuickTable(id="patch-files", cursor_type="row")
        # Under 110 columns the diff gets the full width under the recipes, wrapped: side by
        # side at 80 it had 45 columns and cut the diff's paths and code mid-word.
        stacked = self.app.size.width < 110
        self.wrap = stacked
        with Vertical(id="patch-panes", classes="stacked") if stacked else Horizontal(id="patch-panes"):
            with VerticalScroll(id="patch-left"):
                yield Static("Recipes", classes="title")
                yield Static(id="recipes")
            with VerticalScroll(id="diff-pane"):
                yield Static(id="diff-title")
                yield Static("No plan yet (p plans the worker patch)", id="diff")

    def on_mount(self) -> None:
        self.query_one("#patch-files", DataTable).add_columns("file", "status", "sha256")

    @property
    def selected_file(self) -> str | None:
        return self.query_one("#patch-files", QuickTable).cursor_key

    _host: HostState | None = None

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        self._host = host
        table = self.query_one("#patch-files", DataTable)
        cursor = table.cursor_row
        table.clear()
        for f, ps in host.patches.items():
            status = Text(ps.status, style=STATUS_STYLE.get(ps.status, ""))
            table.add_row(plain("/".join(f.split("/")[-3:])), status, ps.sha256[:12] or "-", key=f)
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1))
        self.show_file(host)

    def show_file(self, host: HostState) -> None:
        name = self.selected_file
        ps = host.patches.get(name) if name else None
        if ps is None:
            return
        text = Text()
        if ps.refused:
            text.append(f"refused: {ps.refused}\n", style="bold red")
        if ps.drift:
            text.append(f"{ps.drift}\n", style="bold red")
        for r in ps.recipes:
            applies = r.get("applies")
            mark, style = ("✓", "green") if applies else ("✗", "red") if applies is False else ("•", "")
            text.append(f"{mark} {r.get('name', '?')}", style=style)
            if r.get("name") in ps.in_effect:
                text.append(f" ({ps.status.replace('_', ' ')})", style="bold green")
            if r.get("reason"):
                text.append(f"  {r['reason']}", style="dim")
            text.append("\n")
        self.query_one("#recipes", Static).update(text)
        self.query_one("#diff-title", Static).update(Text(ps.file, style="bold"))
        diff = self.query_one("#diff", Static)
        from rich.syntax import Syntax  # pygments: imported when a diff is first shown

        # the state holds it sanitised already (console/tui/shown.py); kept here as the last gate
        diff.update(Syntax(visible_lines(ps.diff), "diff", theme="ansi_dark", word_wrap=self.wrap) if ps.diff
                    else Text("(no changes: the file already matches)", style="dim"))
        # unwrapped, the diff is as wide as its longest line and the pane scrolls sideways
        longest = max((len(line) for line in ps.diff.splitlines()), default=0)
        diff.styles.width = "100%" if self.wrap else max(longest + 2, 10)
        pane = self.query_one("#diff-pane", VerticalScroll)
        pane.border_subtitle = "w: scroll sideways" if self.wrap else "w: wrap · ←/→ scroll"

    wrap = False

    def toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        if self._host is not None:
            self.show_file(self._host)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self._host is not None:
            self.show_file(self._host)
