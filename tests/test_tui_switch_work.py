"""What a screen switch does between its key and its paint (issue #17): only what the new
screen needs. Counted, never timed.

- the switch's fallback release timer (SWITCH_HOLD_S) is stopped once the switch is released:
  left running, it fired into the next switch of an operator flipping screens once a second.
"""

from __future__ import annotations

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
