"""Every live session is recorded the same way (console/sessions/live.py), the TUI's too, and
replaying the recording shows what the operator saw."""

from __future__ import annotations

import sys
from pathlib import Path

from console.cli import apply_top_level, build_parser
from console.sessions.live import open_session
from console.sessions.reader import SessionReader
from console.tui.app import ConsoleApp
from console.tui.controller import LiveSource
from console.tui.model import ConsoleState
from remote.link.hosts import Config, HostConfig
from remote.spine import events as ev
from tests.tui_helpers import SIZE, wait_for


async def test_a_tui_session_is_recorded_and_replays_to_the_same_state(tmp_path: Path) -> None:
    path = tmp_path / "tui.jsonl"
    session = open_session(["local"], path=path)
    hc = HostConfig(name="local", python=sys.executable, workdir=str(tmp_path / "box"))
    app = ConsoleApp(LiveSource(Config(hosts={"local": hc}, path=None), bus=session.bus),
                     start_screen="hosts")
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("c")  # connect: the local host, its live stats
            await wait_for(pilot, lambda: app.state.host("local").connection == "live"
                           and app.state.host("local").cpu is not None, timeout=60)
            await app.source.controller.aclose()
            app.drain()
            live = app.state.host("local")
            live_view = (live.connection, live.stats_source, live.mem_total)
    finally:
        session.close()
    with SessionReader(path) as reader:
        events = list(reader.events())
        assert reader.header.hosts == ["local"]
    kinds = {e.kind for e in events}
    assert {ev.CONNECTION_UP, ev.STATS_SAMPLE} <= kinds
    replayed = ConsoleState(["local"])
    replayed.apply_all(events)
    h = replayed.host("local")
    assert (h.connection, h.stats_source, h.mem_total) == live_view


def test_the_tui_takes_the_recording_options() -> None:
    args = apply_top_level(build_parser().parse_args(["--no-record"]))
    assert args.command is None and args.no_record is True
    args = apply_top_level(build_parser().parse_args(["--session", "x.jsonl"]))
    assert args.session == "x.jsonl" and args.no_record is False
