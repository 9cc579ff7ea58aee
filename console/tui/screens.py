"""The console's screens as one table: a row each gives its key, its tab (title, short title),
its help line and the view that draws it.

Kept out of app.py (issue 31: the app split by screen) so that adding a screen is a row here and
a module under widgets/, not more of the app; the key bindings, the palette and the help screen
take their screen commands from this table too (console/tui/registry.py). Which screens a console
shows depends on what it was started on: the Replay screen only in a replay, the Fleet screen
only where there are several hosts (with one, the Hosts and Overview screens already say
everything it would). No Textual at import: a view's module is imported when it is first shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.named_rows import row_named

if TYPE_CHECKING:
    from console.tui.widgets.common import View
    from console.tui.widgets.replay import MarkerRow
    from console.tui.widgets.tab_bar import TabTitle


# What a view may need from the app when it is built: the hosts' one-line descriptions (the
# Hosts screen) and the replay's markers (the Replay screen).
Markers = Callable[[], "list[MarkerRow]"]


def _lazy(module: str, cls: str, arg: str = "") -> Callable[[dict[str, str], Markers], View]:
    """The view class `cls` of console/tui/widgets/`module`.py, imported when first shown; `arg`
    names what it is built with besides its id: "describe" (Hosts) or "markers" (Replay)."""

    def build(describe: dict[str, str], markers: Markers) -> View:
        from importlib import import_module

        view = getattr(import_module(f"console.tui.widgets.{module}"), cls)
        args = {"describe": (describe,), "markers": (markers(),)}.get(arg, ())
        return view(*args, id=f"view-{module}")  # type: ignore[no-any-return]

    return build


@dataclass(frozen=True)
class Screen:
    name: str
    key: str  # the key that shows it (and its number on the tab)
    title: str  # the tab's title
    help: str  # one line in the palette and the help screen
    view: Callable[[dict[str, str], Markers], View]
    # The title under NARROW columns, where the bar would overflow with the full ones: whole
    # words, never a cut one ("2 Over 3 Probe" read as cut labels at 80 columns).
    short: str = ""
    replay_only: bool = False  # shown only while a session replays
    fleet_only: bool = False  # shown only with several hosts

    @property
    def short_title(self) -> str:
        return self.short or self.title


# In tab order. "fleet" is last so that the others keep their keys (9 shows it).
TABLE: tuple[Screen, ...] = (
    Screen("hosts", "1", "Hosts", "Configured hosts and their connection", _lazy("hosts", "HostsView", "describe")),
    Screen("overview", "2", "Overview", "GPUs, load, jobs, findings", _lazy("overview", "OverviewView")),
    Screen("probes", "3", "Probes", "Environment, model structure, compat", _lazy("probes", "ProbesView")),
    Screen("patch", "4", "Patch", "Worker patch recipes and diff", _lazy("patch", "PatchView")),
    Screen("pipeline", "5", "Pipeline", "Stages, progress, log tail", _lazy("pipeline", "PipelineView")),
    Screen("stats", "6", "Stats/AllReduce", "GPU history and AllReduce", _lazy("stats", "StatsView"), short="Stats"),
    Screen("bench", "7", "Bench", "Benchmark sweep and acceptance", _lazy("bench", "BenchView")),
    Screen("replay", "8", "Replay", "Replay controls and markers", _lazy("replay", "ReplayView", "markers"),
           replay_only=True),
    Screen("fleet", "9", "Fleet", "Every box at once, a row each (with several hosts)", _lazy("fleet", "FleetView"),
           fleet_only=True),
)
SCREENS = tuple(s.name for s in TABLE)
NARROW = 110


def get(name: str) -> Screen:
    return row_named(TABLE, name, "screen", KeyError)


def shown_screens(mode: str, hosts: int) -> list[str]:
    """The screens this console has, in tab order."""
    return [s.name for s in TABLE
            if (not s.replay_only or mode == "replay") and (not s.fleet_only or hosts > 1)]


def tab_titles(names: list[str]) -> list[TabTitle]:
    from console.tui.widgets.tab_bar import TabTitle

    return [TabTitle(s.name, f"{s.key} {s.title}", f"{s.key} {s.short_title}", s.short_title)
            for s in map(get, names)]


def make_view(name: str, describe: dict[str, str], markers: Markers) -> View:
    """The view of screen `name`, built when it is first shown."""
    return get(name).view(describe, markers)
