"""Fleet screen: every box at once, one live row each (issue 29); Enter on a row selects that
box and opens its Overview, where the existing screens show it in full.

The rows are built by console/tui/fleet_rows.py from the folded state (so a replay of a fleet
session looks as the live one did). While this screen is shown the app refreshes it for events
of any host, not only the selected one (app.py `_fold`), at most every REFRESH_S: three boxes
sampling at 10 Hz cost one table update a tenth of a second, written cell by cell (QuickTable
`set_rows` touches only the cells that changed).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from console.tui.fleet_rows import HEADER, fleet_rows, totals
from console.tui.messages import HostSelected
from console.tui.model import (
    BENCH,
    CONNECTION,
    JOBS,
    NOTES_DOMAIN,
    PATCH,
    STATS,
    ConsoleState,
    HostState,
)
from console.tui.render import cut_at_word
from console.tui.shown import plain
from console.tui.widgets.common import View
from console.tui.widgets.quick_table import QuickTable

# The screen Enter opens for the chosen box.
DRILL_SCREEN = "overview"
PROBLEMS_SHOWN = 6  # lines of problems under the table at most (a box each)


class FleetView(View):
    DOMAINS = (CONNECTION, STATS, JOBS, PATCH, BENCH, NOTES_DOMAIN)

    def compose(self) -> ComposeResult:
        yield Static("Fleet — a row per box; enter opens its screens", classes="title")
        yield QuickTable(id="fleet-table", cursor_type="row")
        yield Static(id="fleet-totals", classes="hint", markup=False)
        yield Static(id="fleet-problems", markup=False)

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*HEADER)

    def update_view(self, state: ConsoleState, host: HostState, domains: frozenset[str]) -> None:
        table = self.query_one(QuickTable)
        rows = fleet_rows(state, getattr(self.app, "mode", "live"))
        # a host's name is config or session text: plain, drawn (shown.plain)
        table.set_rows([(r.host, [plain(r.host), Text(r.state, style=r.style), *r.cells])
                        for r in rows])
        self.query_one("#fleet-totals", Static).update(totals(rows))
        width = max(20, self.app.size.width - 4)
        lines = Text()
        problems = [r for r in rows if r.problem]
        for r in problems[:PROBLEMS_SHOWN]:
            text = f"{r.host}: {' '.join(r.problem.split())}"
            end, cut = cut_at_word(text, width)
            if lines:
                lines.append("\n")
            lines.append(text[:end] + (" …" if cut else ""), style="red")
        if len(problems) > PROBLEMS_SHOWN:
            lines.append(f"\n{len(problems) - PROBLEMS_SHOWN} more: n on a box lists its notes",
                         style="dim")
        self.query_one("#fleet-problems", Static).update(lines)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.post_message(HostSelected(str(event.row_key.value), screen=DRILL_SCREEN))
