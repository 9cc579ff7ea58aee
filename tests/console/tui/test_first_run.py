"""A first run: no console.toml anywhere. The Hosts screen says where the console looked and how
to add a box; `console init` writes a commented console.toml that loads as it is, gives a host
once a block is uncommented, and is never written over."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.cli import main
from console.tui.launch import HostsApp
from remote.errors import EXIT_OK, EXIT_USAGE
from remote.link.hosts import load_config, parse_config
from tests.tui_helpers import settle


@pytest.fixture
def no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory and a user config dir with no console.toml in either."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


def test_init_writes_a_commented_config_and_never_overwrites(
        no_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init"]) == EXIT_OK
    written = no_config / "console.toml"
    text = written.read_text()
    assert "wrote " + str(Path("console.toml")) in capsys.readouterr().out
    # Loads as it is, with no host enabled: every line is a comment or blank.
    assert load_config(None).path == written and load_config(None).hosts == {}
    assert all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())
    # Uncommenting the box block (up to the first blank line) gives a working host entry.
    lines = text.splitlines()
    start = lines.index("# [hosts.box]")
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line[2:] if line.startswith("# ") else line)
    host = parse_config("\n".join(block), "uncommented").host("box")
    assert host.ssh == "ops@gpu-box" and host.runtime == "docker" and host.ssh_options["port"] == 22
    # A second init refuses with one line and leaves the file as it was.
    written.write_text(text + "# my own edit\n")
    assert main(["init"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err
    assert written.read_text().endswith("# my own edit\n")


async def test_first_run_hosts_screen_says_where_it_looked(no_config: Path) -> None:
    app = HostsApp(None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        note = app.query_one("#first-run")
        text = str(note.render())
        flat = " ".join(text.split())
        assert "No console.toml found" in flat
        # each path on a line of its own; one longer than the line elided in its middle, its
        # start and its end kept
        lines = [line.strip() for line in text.splitlines()]
        for path in (str(no_config / "console.toml"), str(no_config / "xdg" / "eagle3-console" / "console.toml")):
            shown = next(line for line in lines if line == path or (
                "…" in line and path.startswith(line.split("…")[0]) and path.endswith(line.split("…")[1])))
            assert len(shown) <= 74 and (shown == path or len(path) > 74), (shown, path)
        assert "console init" in flat and "[hosts.NAME]" in flat
        assert note.region.height >= 3 and note.region.width > 0  # on screen, wrapped


async def test_hosts_screen_with_a_config_has_no_first_run_note(no_config: Path) -> None:
    (no_config / "console.toml").write_text('[hosts.box]\nssh = "ops@127.0.0.1"\n')
    app = HostsApp(None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert not app.query("#first-run")
