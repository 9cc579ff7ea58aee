"""Issue 40, one fact once: a screen is one row of console/tui/screens.py (its key, its tab and
its view), and the key bindings, the palette and the help screen take their screen commands from
that row (console/tui/registry.py)."""

from __future__ import annotations

from console.tui import screens
from console.tui.registry import COMMANDS, commands_for


def test_each_row_is_a_key_a_tab_and_a_view() -> None:
    keys = [s.key for s in screens.TABLE]
    assert len(set(keys)) == len(keys) and len(set(screens.SCREENS)) == len(keys)
    nav = {c.id: (c.key, c.action, c.help) for c in COMMANDS if c.id.startswith("screen.")}
    assert nav == {f"screen.{s.name}": (s.key, f"show({s.name!r})", s.help) for s in screens.TABLE}
    assert "screen.replay" not in {c.id for c in commands_for("live")}
    for s in screens.TABLE:
        view = screens.make_view(s.name, {"local": "this machine"}, list)
        assert view.id == f"view-{s.name}", s.name
    bar = screens.tab_titles(screens.shown_screens("live", hosts=1))
    assert [t.name for t in bar] == ["hosts", "overview", "probes", "patch", "pipeline", "stats",
                                     "bench"]
    assert (bar[5].title, bar[5].short) == ("6 Stats/AllReduce", "6 Stats")
    assert screens.shown_screens("replay", hosts=2)[-2:] == ["replay", "fleet"]
