"""Issue 33 item 2: one sanitising point for every field that came from outside and reaches the
operator's terminal — a host's name and settings in `console hosts`, a session header's hosts
and its records in `console replay --print`, the replay's warnings, error lines and the TUI's
host table and top bar. Each hostile class (ESC, BEL, CSI, OSC, C1 controls, newlines, bidi
overrides) must arrive drawn, never raw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.cli import main
from console.tui.widgets.common import TopBar
from remote.spine import events as ev
from remote.spine.events import Event
from remote.spine.sanitize import visible
from tests.local_box import local_console_toml
from tests.tui_helpers import replayed
from tests.tui_sessions import T0, write_session

# One of each class, and what `visible` draws for it.
HOSTILE = {
    "ESC": ("\x1b", "␛"),
    "BEL": ("\x07", "␇"),
    "CSI": ("\x1b[2J", "␛[2J"),
    "OSC": ("\x1b]0;evil\x07", "␛]0;evil␇"),
    "C1 CSI": ("\x9b31m", "\\x9b31m"),
    "C1 NEL": ("\x85", "\\x85"),
    "newline": ("\n", "␊"),
    "carriage return": ("\r", "␍"),
    "RLO": ("\u202e", "<U+202E>"),
    "LRE": ("\u202a", "<U+202A>"),
    "RLI": ("\u2067", "<U+2067>"),
    "PDI": ("\u2069", "<U+2069>"),
    "line separator": ("\u2028", "<U+2028>"),
}
EVIL_NAME = "box\x1b]0;evil\x07\x1b[2J\nfake\u202e\x9b"
RAW = ("\x1b", "\x07", "\x9b", "\x85", "\u202e", "\u2028")


def assert_clean(text: str) -> None:
    for raw in RAW:
        assert raw not in text, f"raw {raw!r} reaches the terminal: {text!r}"


@pytest.mark.parametrize("name", list(HOSTILE))
def test_each_hostile_class_is_drawn(name: str) -> None:
    raw, drawn = HOSTILE[name]
    assert visible(f"a{raw}b") == f"a{drawn}b"
    assert visible(visible(f"a{raw}b")) == f"a{drawn}b"  # idempotent: safe to apply twice


def _toml_str(text: str) -> str:
    return json.dumps(text)  # a JSON string with \\uXXXX escapes is a valid TOML basic string


def test_console_hosts_draws_every_config_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "console.toml"
    # C0 controls in a setting are refused when the config loads (one drawn line, exit 2) ...
    config.write_text(f"[hosts.{_toml_str(EVIL_NAME)}]\n"
                      f"ssh = {_toml_str('user@evil' + HOSTILE['OSC'][0])}\n")
    assert main(["hosts", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert_clean(err)
    assert len(err.splitlines()) == 1 and "control character '\\x1b'" in err, err
    # ... the name is free text, and C1 controls and bidi overrides pass the load: all drawn
    config.write_text(
        f"[hosts.{_toml_str(EVIL_NAME)}]\n"
        f"ssh = {_toml_str('user@evil' + HOSTILE['C1 NEL'][0])}\n"
        f"python = {_toml_str('/usr/bin/python3' + HOSTILE['C1 CSI'][0])}\n"
        f"workdir = {_toml_str('/w' + HOSTILE['RLO'][0] + 'x' + HOSTILE['line separator'][0])}\n")
    assert main(["hosts", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert_clean(out)
    assert "box␛]0;evil␇␛[2J␊fake<U+202E>\\x9b" in out
    assert "user@evil\\x85" in out and "python3\\x9b31m" in out
    assert "/w<U+202E>x<U+2028>" in out
    # one line per host: the table's rows are the header, local and the hostile box
    assert len(out.splitlines()) == 4, out
    # --json escapes by itself (json.dumps keeps nothing raw)
    assert main(["hosts", "--config", str(config), "--json"]) == 0
    js = capsys.readouterr().out
    assert_clean(js)
    assert EVIL_NAME in [h["name"] for h in json.loads(js)]


def _hostile_session(path: Path) -> Path:
    events = [Event(kind=ev.JOB_LINE, host=EVIL_NAME, ts=T0,
                    payload={"run_id": "r1\x1b[2J", "text": "line" + HOSTILE["OSC"][0],
                             "offset": 1})]
    return write_session(path, events, hosts=(EVIL_NAME, "ok\u2066host"))


def test_replay_print_draws_the_header_and_the_lines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = _hostile_session(tmp_path / "s.jsonl")
    assert main(["replay", str(session), "--print"]) == 0
    out = capsys.readouterr().out
    assert_clean(out)
    header, *lines = out.splitlines()
    assert header.startswith("# session started") and "box␛]0;evil␇␛[2J␊fake" in header
    assert "ok<U+2066>host" in header
    assert len(lines) == 1 and "line␛]0;evil␇" in lines[0], lines


def test_replay_warnings_quoting_the_file_are_drawn(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = _hostile_session(tmp_path / "s\u202e.jsonl")  # the path is text too
    with session.open("ab") as fh:
        fh.write(b'{"ts": "junk\x1b[2J\xc2\x9b"}\n')  # a damaged record quoting hostile bytes
    main(["replay", str(session), "--print"])
    err = capsys.readouterr().err
    assert err.startswith("warning: ")
    assert_clean(err)
    assert "s<U+202E>.jsonl" in err


def test_an_error_line_naming_a_hostile_host_is_one_drawn_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = local_console_toml(tmp_path)
    rc = main(["jobs", "--host", EVIL_NAME, "--config", str(config), "list"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert_clean(err)
    # an error is one line: whitespace (the newline too) folds to a space, the rest is drawn
    assert len(err.splitlines()) == 1 and "box␛]0;evil␇␛[2J fake<U+202E>\\x9b" in err, err


async def test_tui_host_table_and_top_bar_draw_a_hostile_host_name(tmp_path: Path) -> None:
    async with replayed(_hostile_session(tmp_path / "s.jsonl"), start_screen="hosts") as (app, _):
        screen = "\n".join(strip.text for strip in app.screen._compositor.render_strips())
        assert_clean(screen)
        assert "box␛]0;evil␇␛[2J␊fake" in screen, screen
        top = app.query_one(TopBar)
        assert_clean(str(top.render()))
