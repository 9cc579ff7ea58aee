"""Replay screen: where the replay is, at what speed, and the markers to seek to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from console.tui.messages import MarkerChosen
from console.tui.model import MARKERS, ConsoleState, HostState
from console.tui.quiet import set_content, text_shape
from console.tui.widgets.common import View
from console.tui.widgets.quick_table import QuickTable


@dataclass(frozen=True, slots=True)
class MarkerRow:
    index: int
    time: str
    kind: str
    label: str


class ReplayView(View):
    DOMAINS = (MARKERS,)

    def __init__(self, markers: list[MarkerRow], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.markers = markers

    def compose(self) -> ComposeResult:
        yield Static(id="replay-status")
        yield Static("Markers — enter seeks, [ ] previous/next, t seeks to a time", classes="title")
        yield QuickTable(id="markers", cursor_type="row")

    def on_mount(self) -> None:
        table = self.query_one("#markers", DataTable)
        table.add_columns("#", "time", "kind", "what")
        for r in self.markers:
            table.add_row(str(r.index), r.time, r.kind, r.label[:70], key=str(r.index))
        if self._status is not None:
            self.set_status(self._status)

    _status: Text | None = None

    def set_status(self, text: Text) -> None:
        """Called by the app on every refresh; may come before this view's children exist."""
        if self._status is not None and text.markup == self._status.markup:
            return
        self._status = text
        found = self.query("#replay-status")
        if found:
            set_content(found.first(Static), lambda: text,
                        shape=text_shape(text.plain, self.app.size.width))

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        return None  # markers come from the file index, set once by the app

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.post_message(MarkerChosen(int(event.row_key.value)))
