"""Starting the console: on the hosts of a console.toml, on some of them (`console --host
a,b,c` or `--host GROUP`, a fleet), or on a session file. Kept out of app.py (issue 31).

A fleet is connected at start, every box at once, on the Fleet screen. What headless fleet
commands do with bad input, the TUI does too (console/fleet.py): a group member that is not a
host, or a group that names itself, is one error line for that name (a console.error event with
its host, so the Fleet screen shows it on its row and the session keeps it); a box that cannot
be reached is its connection.down line; the other boxes connect and stream all the same. A name
typed on the command line that is neither a host nor a group is refused before anything starts
(exit 2), as headless commands refuse it.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from console.sessions.live import open_session
from console.tui.app import ConsoleApp
from console.tui.controller import LiveController, LiveSource, ReplaySource
from remote.errors import EXIT_OK
from remote.link.hosts import Config, all_hosts, load_config
from remote.spine import events as ev
from remote.spine.bus import EventBus

if TYPE_CHECKING:
    from console.sessions.reader import SessionReader
    from remote.link.groups import Resolved


def describe_hosts(config: Config) -> dict[str, str]:
    return {h.name: (h.ssh or "(this machine)") + (f" · {h.runtime}:{h.container}" if h.container else "")
            for h in all_hosts(config)}


class FleetSource(LiveSource):
    """The hosts a `--host` value named, each connected at start; bad members said once each."""

    def __init__(self, config: Config, resolved: Resolved, bus: EventBus | None = None, *,
                 accept_new_host_key: bool = False) -> None:
        bus = bus or EventBus()
        self.live = LiveController(config, bus)
        super().__init__(config, bus, controller=self.live)
        self.resolved = resolved
        # `console --host ... --accept-new-host-key`: a box's first key trusted and stored, as
        # the headless commands' flag does (a changed key is refused all the same); without it
        # an unknown key is that box's connection.down line, and `c` on it offers the key.
        self.ssh_kwargs = {"accept_new_host_key": True} if accept_new_host_key else {}

    def host_names(self) -> list[str]:
        return list(self.resolved.names)

    async def run(self) -> None:
        for name, why in self.resolved.problems:
            self.bus.emit(ev.CONSOLE_ERROR, name, message=why)
        # A failed connect said so itself (connection.down, on its row); the others go on.
        await asyncio.gather(*(self.live.connect(n, **self.ssh_kwargs) for n in self.resolved.names),
                             return_exceptions=True)


class HostsApp(ConsoleApp):
    """The live console on the hosts of a console.toml (the placeholder's name and signature)."""

    def __init__(self, config_path: str | None = None, bus: EventBus | None = None) -> None:
        config = load_config(config_path)
        super().__init__(LiveSource(config, bus=bus), describe=describe_hosts(config))


def fleet_app(config: Config, resolved: Resolved, bus: EventBus | None = None, *,
              accept_new_host_key: bool = False) -> ConsoleApp:
    """The console on the named hosts, connecting them at start; the Fleet screen first when
    there are several."""
    source = FleetSource(config, resolved, bus, accept_new_host_key=accept_new_host_key)
    several = len(source.host_names()) > 1
    return ConsoleApp(source, describe=describe_hosts(config),
                      start_screen="fleet" if several else "hosts")


async def run_app(args: argparse.Namespace) -> int:
    """The live TUI, recorded like any headless command (console/sessions/live.py)."""
    config_path = getattr(args, "config", None)
    config = load_config(config_path)
    spec = getattr(args, "tui_host", None)
    resolved = None
    if spec:
        from remote.link.groups import resolve

        resolved = resolve(config, spec)  # a typo on the command line: exit 2 before any start
        hosts = resolved.names
    else:
        hosts = [h.name for h in all_hosts(config)]
    session = open_session(hosts, record=not getattr(args, "no_record", False),
                           path=getattr(args, "session", None),
                           redact=not getattr(args, "no_redact", False))
    accept = bool(getattr(args, "tui_accept_new_host_key", False))
    endpoint = None
    port = getattr(args, "tui_prometheus", None)
    if port is not None:  # the same bus the screens read: no second stream
        from remote.ops.stats import serve_prometheus

        try:
            endpoint = serve_prometheus(session.bus, port)
        except BaseException:
            session.close()
            raise
        session.bus.emit(ev.CONSOLE_INFO, "", message=f"Prometheus metrics at {endpoint.url}")
    app = (fleet_app(config, resolved, session.bus, accept_new_host_key=accept) if resolved is not None
           else HostsApp(config_path, session.bus))
    try:
        await app.run_async()
    finally:
        try:
            await app.source.controller.aclose()
        finally:
            if endpoint is not None:
                endpoint.close()
            session.close()
    return exit_code(app)


def exit_code(app: ConsoleApp) -> int:
    """A console that Textual ended on an exception exits non-zero (Textual prints the
    traceback), never 0 as if the operator had quit."""
    rc = app.return_code
    return rc if isinstance(rc, int) and rc != 0 else EXIT_OK


async def run_replay_app(reader: SessionReader) -> int:
    app = ConsoleApp(ReplaySource(reader))
    await app.run_async()
    return exit_code(app)
