"""The options `console --help` lists before COMMAND (issue 48 row 5): given there, each reaches
the command (`console --config X hosts` reads X, `console --no-record probe env` records
nothing, `console --session P probe env` records to P) or is refused in one line (a command
that takes no such option, the same option given twice with different values). None is
silently ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.cli import apply_top_level, build_parser, main
from console.sessions.writer import default_session_dir
from remote.errors import EXIT_USAGE

BOX = '[hosts.topbox]\nssh = "ops@10.9.8.7"\nworkdir = "/data/x"\n'


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_config_before_the_command_is_the_commands(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(BOX)
    rc, out, _ = run(capsys, "--config", str(cfg), "hosts")
    assert rc == 0 and "topbox" in out and str(cfg) in out
    rc, _, err = run(capsys, "--config", str(tmp_path / "nonexistent.toml"), "hosts")
    assert rc == EXIT_USAGE and "config file not found" in err and len(err.splitlines()) == 1
    rc, _, err = run(capsys, "--config", str(cfg), "hosts", "--config", str(tmp_path / "o.toml"))
    assert rc == EXIT_USAGE and err.startswith("error: --config given before and after hosts "
                                               "with different values")


def test_recording_options_before_the_command(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    sessions = default_session_dir()
    before = set(sessions.glob("*.jsonl*")) if sessions.exists() else set()
    rc, _, err = run(capsys, "--no-record", "probe", "env", "--host", "local")
    assert rc == 0, err
    after = set(sessions.glob("*.jsonl*")) if sessions.exists() else set()
    assert after == before  # nothing recorded
    path = tmp_path / "mine.jsonl"
    rc, _, err = run(capsys, "--session", str(path), "probe", "env", "--host", "local")
    assert rc == 0, err
    assert path.read_text().startswith('{"format":"eagle3-console-session"')
    rc, _, err = run(capsys, "--session", str(tmp_path / "x.jsonl"), "hosts")
    assert rc == EXIT_USAGE and err == "error: --session before hosts: console hosts takes no " \
                                       "--session\n"


def test_the_tui_keeps_them() -> None:
    args = apply_top_level(build_parser().parse_args(
        ["--config", "c.toml", "--session", "s.jsonl", "--no-redact"]))
    assert args.command is None and args.config == "c.toml" and args.session == "s.jsonl"
    assert args.no_redact is True and args.no_record is False
