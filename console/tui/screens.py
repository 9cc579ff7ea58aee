"""The console's screens as a table: each one's tab titles and the view that draws it.

Kept out of app.py (issue 31: the app split by screen) so that adding a screen is a row here and
a module under widgets/, not more of the app. Which screens a console shows depends on what it
was started on: the Replay screen only in a replay, the Fleet screen only where there are
several hosts (with one, the Hosts and Overview screens already say everything it would).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from console.tui.registry import SCREENS
from console.tui.widgets.tab_bar import TabTitle

if TYPE_CHECKING:
    from console.tui.widgets.common import View
    from console.tui.widgets.replay import MarkerRow

TITLES = {"hosts": "Hosts", "overview": "Overview", "probes": "Probes", "patch": "Patch",
          "pipeline": "Pipeline", "stats": "Stats/AllReduce", "bench": "Bench", "replay": "Replay",
          "fleet": "Fleet"}
# Under NARROW columns the tab bar would overflow with the full titles (the bar picks by its width):
# whole words, never a cut one ("2 Over 3 Probe" read as cut labels at 80 columns).
SHORT_TITLES = {**TITLES, "stats": "Stats"}
NARROW = 110


def shown_screens(mode: str, hosts: int) -> list[str]:
    """The screens this console has, in tab order (their keys are their place in SCREENS)."""
    return [name for name in SCREENS
            if (name != "replay" or mode == "replay") and (name != "fleet" or hosts > 1)]


def tab_titles(names: list[str]) -> list[TabTitle]:
    return [TabTitle(name, f"{SCREENS.index(name) + 1} {TITLES[name]}",
                     f"{SCREENS.index(name) + 1} {SHORT_TITLES[name]}", SHORT_TITLES[name])
            for name in names]


def make_view(name: str, describe: dict[str, str],
              markers: Callable[[], list[MarkerRow]]) -> View:
    """The view of screen `name`, built when it is first shown."""
    from console.tui.widgets.bench import BenchView
    from console.tui.widgets.fleet import FleetView
    from console.tui.widgets.hosts import HostsView
    from console.tui.widgets.overview import OverviewView
    from console.tui.widgets.patch import PatchView
    from console.tui.widgets.pipeline import PipelineView
    from console.tui.widgets.probes import ProbesView
    from console.tui.widgets.replay import ReplayView
    from console.tui.widgets.stats import StatsView

    views: dict[str, Callable[[], View]] = {
        "hosts": lambda: HostsView(describe, id="view-hosts"),
        "overview": lambda: OverviewView(id="view-overview"),
        "probes": lambda: ProbesView(id="view-probes"),
        "patch": lambda: PatchView(id="view-patch"),
        "pipeline": lambda: PipelineView(id="view-pipeline"),
        "stats": lambda: StatsView(id="view-stats"),
        "bench": lambda: BenchView(id="view-bench"),
        "replay": lambda: ReplayView(markers(), id="view-replay"),
        "fleet": lambda: FleetView(id="view-fleet"),
    }
    return views[name]()
