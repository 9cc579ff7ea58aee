"""What a screen switch does between its key and its paint (issue #17): only what the new
screen needs. Counted, never timed.

- the switch's fallback release timer (SWITCH_HOLD_S) is stopped once the switch is released:
  left running, it fired into the next switch of an operator flipping screens once a second.
"""

from __future__ import annotations

from typing import Any

from console.tui.app import SWITCH_HOLD_S
from tests.tui_helpers import SIZE, live_app, settle, wait_for


async def test_a_released_switch_leaves_no_timer_to_fire_into_the_next() -> None:
    app = live_app(start_screen="overview")
    calls: list[bool] = []  # one per _release_switch call: did it release the current hold?
    original = app._release_switch

    def release(hold: object) -> None:
        calls.append(hold is app._switch_hold)
        original(hold)

    app._release_switch = release  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for key, name in (("6", "stats"), ("5", "pipeline"), ("2", "overview")):
            await pilot.press(key)
            await wait_for(pilot, lambda: app._switch_hold is None)
            assert app.active_screen_name == name
        await pilot.pause(SWITCH_HOLD_S + 0.3)  # past every switch's fallback
        assert calls == [True, True, True]  # each released once; no stale timer fired after


async def test_the_hidden_view_is_blurred_after_the_paint_not_before() -> None:
    """A switch restyles one widget before its paint (the new view's focused one, whose look
    the paint shows); the old view's, hidden, loses its focus look after that paint."""
    app = live_app(start_screen="overview")
    log: list[tuple[str, Any]] = []  # ("restyle", node) / ("paint", screen name)
    update_styles, display = app.update_styles, app._display

    def restyle(node: Any, animate: bool = True) -> None:
        log.append(("restyle", node))
        update_styles(node, animate=animate)

    def paint(screen: Any, renderable: Any) -> None:
        if renderable is not None:
            log.append(("paint", app.active_screen_name))
        display(screen, renderable)

    app.update_styles = restyle  # type: ignore[method-assign]
    app._display = paint  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for key, name in (("6", "stats"), ("5", "pipeline"), ("2", "overview"), ("6", "stats")):
            old_focused = app.screen.focused
            assert old_focused is not None and old_focused.has_focus
            log.clear()
            await pilot.press(key)
            await wait_for(pilot, lambda: app._switch_hold is None)
            await settle(pilot)
            first_paint = log.index(("paint", name))
            before = [node for what, node in log[:first_paint] if what == "restyle"]
            after = [node for what, node in log[first_paint:] if what == "restyle"]
            new_focused = app.screen.focused
            assert new_focused is not None and new_focused is not old_focused
            assert before == [new_focused]  # the focus the paint shows, and nothing else
            assert old_focused in after  # blurred all the same, once painted
            assert new_focused.has_focus and not old_focused.has_focus


async def test_a_visible_widget_is_blurred_before_the_paint() -> None:
    """The tab bar stays on screen: focused when a switch begins, it is blurred at once, so
    the switch's paint never shows it focused."""
    app = live_app(start_screen="overview")
    shown: list[tuple[str, bool]] = []  # (screen, tab bar focused) at each paint
    display = app._display

    def paint(screen: Any, renderable: Any) -> None:
        if renderable is not None:
            shown.append((app.active_screen_name, app._tab_bar.has_focus))
        display(screen, renderable)

    app._display = paint  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        bar = app._tab_bar
        bar.focus()
        await wait_for(pilot, lambda: bar.has_focus)
        shown.clear()
        app.action_show("stats")
        await wait_for(pilot, lambda: app._switch_hold is None)
        await settle(pilot)
        assert shown and shown[0] == ("stats", False)  # never painted focused on the new screen
        assert not bar.has_focus and app.screen.focused is not bar
