"""The console against the loopback OpenSSH sshd: connect from the Hosts screen, then a network
drop shows as disconnected/reconnecting and recovers to live. Runs once remote/link/ssh.py is on main."""

from __future__ import annotations

import pytest

from console.tui.app import ConsoleApp
from console.tui.controller import LiveSource
from console.tui.widgets.common import TopBar
from remote.link.hosts import Config
from tests.tui_helpers import SIZE, plain, settle, wait_for

pytestmark = [pytest.mark.ssh, pytest.mark.slow]


async def test_connect_over_ssh_and_survive_a_drop(sshd) -> None:  # type: ignore[no-untyped-def]
    base = sshd.host_config("box")
    host = sshd.host_config("box", ssh_options={**base.ssh_options, "keepalive_interval": 1})
    app = ConsoleApp(LiveSource(Config(hosts={"box": host}, path=None)), start_screen="hosts")
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#hosts-table")
        table.focus()
        # "local" sorts first; select "box"
        await pilot.press("down", "enter")
        await settle(pilot)
        assert app.current_host == "box"
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.host("box").connection == "live", timeout=30)
        await settle(pilot)
        assert "● live" in plain(app.query_one(TopBar))
        # The box goes off the network (listener down too), so the console's reconnects fail and
        # the badge must say so; a bare drop reconnects on the next poll, too fast to see.
        sshd.stop()
        await wait_for(pilot, lambda: any(w in plain(app.query_one(TopBar))
                                          for w in ("disconnected", "reconnecting")), timeout=30)
        assert app.state.host("box").connection in ("reconnecting", "down")
        sshd.restart()
        await pilot.press("c")  # reconnect
        await wait_for(pilot, lambda: app.state.host("box").connection == "live", timeout=60)
        await wait_for(pilot, lambda: "● live" in plain(app.query_one(TopBar)), timeout=30)
        await app.source.controller.aclose()
