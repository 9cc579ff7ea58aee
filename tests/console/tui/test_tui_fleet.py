"""The Fleet screen (issue 29 point 5) against the real three-box fleet (tests/fleet_fixture.py:
sshd on 127.0.0.2-4): the console started on `--host fleet` connects every box at start and
shows a live row for each from its own stats stream; Enter on a row opens that box's screens;
the recorded session, replayed, shows all three hosts on the Fleet and Hosts screens. Bad input
as headless fleet commands take it: a member that is not a host, a group that names itself, a
box off the network, one line each, the other boxes live."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from console.cli import main
from console.sessions.live import open_session
from console.sessions.reader import SessionReader
from console.tui.fleet_rows import fleet_rows
from console.tui.launch import fleet_app
from console.tui.widgets.tab_bar import TabBar
from remote.link.groups import resolve
from remote.link.hosts import load_config
from tests.fleet_fixture import Fleet
from tests.tui_helpers import plain, replayed, settle, wait_for

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

BOXES = ["box1", "box2", "box3"]
SIZE = (80, 24)  # the Fleet screen must fit the smallest terminal the console supports


def rows(app: object) -> dict[str, list[str]]:
    table = app.query_one("#fleet-table", DataTable)  # type: ignore[attr-defined]
    out = {}
    for i in range(table.row_count):
        cells = [str(c) for c in table.get_row_at(i)]
        out[cells[0]] = cells
    return out


def sampled(app: object, host: str) -> int:
    return len(app.state.host(host).cpu_history)  # type: ignore[attr-defined]


async def test_fleet_screen_live_then_its_replay(fleet: Fleet, tmp_path: Path) -> None:
    config = load_config(str(fleet.config))
    session_path = tmp_path / "fleet.jsonl"
    session = open_session(BOXES, path=session_path)
    app = fleet_app(config, resolve(config, "fleet"), session.bus)
    try:
        async with app.run_test(size=SIZE) as pilot:
            assert app.active_screen_name == "fleet"
            await wait_for(pilot, lambda: all(sampled(app, h) >= 3 for h in BOXES), timeout=60)
            await settle(pilot)
            shown = rows(app)
            assert list(shown) == BOXES
            for host in BOXES:
                cells = shown[host]
                assert cells[1] == "● live", cells
                assert cells[2].endswith("%") and cells[3].endswith("%"), cells  # cpu, mem
                assert cells[4] == "0", cells  # no GPU on a loopback box: said, not blank
            # live: every box's row moves on, not only the selected host's (box1)
            before = {h: sampled(app, h) for h in BOXES}
            await wait_for(pilot, lambda: all(sampled(app, h) > before[h] + 2 for h in BOXES),
                           timeout=30)
            assert app.current_host == "box1"
            assert "3 hosts, 3 up" in plain(app.query_one("#fleet-totals", Static), SIZE[0])
            assert app.query_one("#tabs", TabBar).labels()[-1] == "9 Fleet"
            # the real patcher's plan on box2 (speculators 0.3.0's worker as shipped)
            assert shown["box2"][8] == "-"
            await app.source.controller.plan_patch("box2")
            await wait_for(pilot, lambda: rows(app)["box2"][8] == "unpatched", timeout=60)
            assert rows(app)["box1"][8] == "-"
            # Enter on box3's row: box3 selected, its Overview shown
            table = app.query_one("#fleet-table", DataTable)
            table.focus()
            await pilot.press("down", "down", "enter")
            await wait_for(pilot, lambda: app.active_screen_name == "overview")
            assert app.current_host == "box3"
            await pilot.press("9")  # back to the fleet
            await wait_for(pilot, lambda: app.active_screen_name == "fleet")
    finally:
        await app.source.controller.aclose()
        session.close()

    # the recorded session: every host on the Fleet screen and the Hosts screen
    assert SessionReader(session_path).header.hosts == BOXES
    async with replayed(session_path, start_screen="fleet", size=SIZE) as (replay, pilot):
        shown = rows(replay)
        assert list(shown) == BOXES and all(r[1] == "● was live" for r in shown.values()), shown
        assert shown["box2"][8] == "unpatched"
        # nine tabs at 80 columns: their words, every one in view
        assert replay.query_one("#tabs", TabBar).labels() == [
            "Hosts", "Overview", "Probes", "Patch", "Pipeline", "Stats", "Bench", "Replay", "Fleet"]
        assert all(r[2].endswith("%") for r in shown.values())
        await pilot.press("1")
        await wait_for(pilot, lambda: replay.active_screen_name == "hosts")
        await settle(pilot)
        hosts = replay.query_one("#hosts-table", DataTable)
        assert [str(hosts.get_row_at(i)[0]) for i in range(hosts.row_count)] == BOXES


async def test_fleet_tui_bad_input_is_one_line_each(fleet: Fleet, tmp_path: Path) -> None:
    cfg = tmp_path / "console.toml"
    cfg.write_text(fleet.config.read_text() + 'bad = ["box1", "nosuch", "bad", "box2", "box3"]\n')
    config = load_config(str(cfg))
    resolved = resolve(config, "bad")
    assert resolved.names == BOXES
    fleet.stop_box("box2")
    app = fleet_app(config, resolved)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.state.host("box2").connection == "down"
                           and all(sampled(app, h) >= 2 for h in ("box1", "box3")), timeout=60)
            await settle(pilot)
            shown = rows(app)
            assert shown["box1"][1] == shown["box3"][1] == "● live"
            assert shown["box2"][1] == "✖ down"
            problems = plain(app.query_one("#fleet-problems", Static), SIZE[0]).splitlines()
            assert len(problems) == 3, problems  # nosuch, bad, box2: one line each
            assert {p.split(":")[0] for p in problems} == {"nosuch", "bad", "box2"}
            assert any("group bad: no such host 'nosuch'" in p for p in problems)
            assert any("group bad names itself (ignored)" in p for p in problems)
            assert {r.host for r in fleet_rows(app.state) if r.problem} == {
                "box2", "nosuch", "bad"}
    finally:
        await app.source.controller.aclose()
        fleet.start_box("box2")


def test_a_typo_on_the_command_line_exits_2_before_the_tui_starts(
        fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(fleet.config), "--no-record", "--host", "box1,nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such host" in err[0] and "nosuch" in err[0], err
    assert main(["--config", str(fleet.config), "--host", "fleet", "hosts"]) == 2
    assert "give it after the command" in capsys.readouterr().err
