"""Placeholder TUI until the TUI issue lands: shows the hosts, or the replayed events."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, RichLog, Static

from remote.bus import EventBus
from remote.errors import EXIT_OK
from remote.events import Event
from remote.hosts import all_hosts, load_config

if TYPE_CHECKING:
    from console.session import SessionReader


class HostsApp(App[int]):
    TITLE = "EAGLE-3 console"
    BINDINGS = [Binding("q", "quit", "Quit", id="quit")]

    def __init__(self, config_path: str | None = None) -> None:
        super().__init__()
        self.config_path = config_path

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Hosts (the full console is under construction: use the headless commands, "
                     "see `console --help`)", id="banner")
        yield DataTable(id="hosts")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("name", "ssh", "container", "workdir")
        for h in all_hosts(load_config(self.config_path)):
            table.add_row(h.name, h.ssh or "(this machine)",
                          f"{h.runtime}:{h.container}" if h.container else "-", h.workdir)


class ReplayApp(App[int]):
    TITLE = "EAGLE-3 console — replay"
    BINDINGS = [Binding("q", "quit", "Quit", id="quit")]

    def __init__(self, reader: SessionReader) -> None:
        super().__init__()
        self.reader = reader

    def compose(self) -> ComposeResult:
        yield Header()
        yield RichLog(id="log", max_lines=5000)
        yield Footer()

    async def on_mount(self) -> None:
        from console.printer import human_line
        from console.replay import Replayer

        log = self.query_one(RichLog)
        bus = EventBus()

        def show(event: Event) -> None:
            line = human_line(event)
            if line is not None:
                log.write(line)

        bus.add_callback(show)
        replayer = Replayer(self.reader, bus, speed=float("inf"))
        replayer.play()
        self.run_worker(replayer.run(), exclusive=True)


async def run_app(args: argparse.Namespace) -> int:
    await HostsApp(getattr(args, "config", None)).run_async()
    return EXIT_OK


async def run_replay_app(reader: SessionReader) -> int:
    await ReplayApp(reader).run_async()
    return EXIT_OK
