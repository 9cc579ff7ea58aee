"""Issue 15 defect 11: the TUI accepts a new host key, and never a changed one.

Against the real loopback sshd with a known_hosts of its own: an empty one (the key is unknown:
the TUI shows the fingerprint, `a` stores it, the host connects), one holding another key (a
changed key: HOST KEY CHANGED with the fix, nothing offered, the file untouched), and a trust
request for a fingerprint other than the one offered (refused, nothing stored).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import asyncssh
import pytest

from console.tui.app import ConsoleApp
from console.tui.controller import LiveController, LiveSource
from console.tui.dialogs import HostKeyScreen
from remote.errors import HostKeyError
from remote.link.hosts import Config, HostConfig
from remote.spine.bus import EventBus
from tests.sshd_harness import Sshd
from tests.tui_helpers import SIZE, settle, wait_for

pytestmark = [pytest.mark.ssh]


def _host(sshd: Sshd, known_hosts: Path) -> HostConfig:
    base = sshd.host_config("box")
    return sshd.host_config("box", ssh_options={**base.ssh_options, "known_hosts": str(known_hosts)})


def _app(sshd: Sshd, known_hosts: Path) -> ConsoleApp:
    return ConsoleApp(LiveSource(Config(hosts={"box": _host(sshd, known_hosts)}, path=None)),
                      start_screen="hosts")


def _fingerprint(sshd: Sshd) -> str:
    return str(asyncssh.read_public_key(str(sshd.host_key_pub)).get_fingerprint("sha256"))


async def _select_box(app: ConsoleApp, pilot) -> None:  # type: ignore[no-untyped-def]
    app.query_one("#hosts-table").focus()
    await pilot.press("down", "enter")  # "local" sorts first
    await settle(pilot)
    assert app.current_host == "box"


async def test_unknown_key_shows_its_fingerprint_and_a_stores_it(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"  # none yet: created 0600 on accept, as the CLI does
    app = _app(sshd, known)
    async with app.run_test(size=SIZE) as pilot:
        await _select_box(app, pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, HostKeyScreen), timeout=30)
        shown = str(app.screen.query_one("#hostkey-text").render())
        assert _fingerprint(sshd) in shown and str(known) in shown
        assert not known.exists()  # nothing stored before the operator says so
        assert app.state.host("box").connection != "live"
        await pilot.press("a")
        await wait_for(pilot, lambda: app.state.host("box").connection == "live", timeout=30)
        await app.source.controller.aclose()
    stored = known.read_text().split()
    offered = sshd.host_key_pub.read_text().split()
    assert stored == [f"[127.0.0.1]:{sshd.port}", *offered[:2]]
    assert oct(known.stat().st_mode & 0o777) == "0o600"


async def test_cancel_leaves_known_hosts_alone(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    app = _app(sshd, known)
    async with app.run_test(size=SIZE) as pilot:
        await _select_box(app, pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, HostKeyScreen), timeout=30)
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, HostKeyScreen)
        assert app.state.host("box").connection != "live"
        assert any("not trusted" in n for n in app.notices)
        await app.source.controller.aclose()
    assert known.read_text() == ""


async def test_changed_key_is_never_offered(sshd: Sshd, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    line = f"[127.0.0.1]:{sshd.port} {' '.join(Path(f'{other}.pub').read_text().split()[:2])}\n"
    known.write_text(line)
    app = _app(sshd, known)
    async with app.run_test(size=SIZE) as pilot:
        await _select_box(app, pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: any(t == "HOST KEY CHANGED" for t, _, _ in app.notice_log),
                       timeout=30)
        await settle(pilot)
        assert not isinstance(app.screen, HostKeyScreen)
        message = next(m for t, _, m in app.notice_log if t == "HOST KEY CHANGED")
        assert _fingerprint(sshd) in message and "remove its old line" in message
        assert any("HOST KEY CHANGED" in n.text for n in app.state.host("box").notes)
        await pilot.press("a")  # no dialog: the key does nothing here
        await settle(pilot)
        assert app.state.host("box").connection != "live"
        await app.source.controller.aclose()
    assert known.read_text() == line


async def test_trust_is_for_the_fingerprint_shown_only(sshd: Sshd, tmp_path: Path) -> None:
    """The key offered at accept time must be the one the operator saw: another is refused."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    controller = LiveController(Config(hosts={"box": _host(sshd, known)}, path=None), EventBus())
    try:
        with pytest.raises(HostKeyError) as err:
            await controller.accept_host_key("box", "SHA256:" + "A" * 43)
        assert err.value.verdict == "unknown" and err.value.fingerprint == _fingerprint(sshd)
        assert known.read_text() == ""
    finally:
        await controller.aclose()
