"""Remote text is drawn, never obeyed: escape sequences from the box reach neither the
operator's terminal (headless printer, error lines, diffs) nor the TUI's log view raw."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from console.cli import main
from console.printer import Printer
from console.tui.widgets.pipeline import LogView
from remote.spine import events as ev
from remote.spine.events import Event
from remote.spine.sanitize import visible, visible_lines
from tests.local_box import local_console_toml
from tests.tui_helpers import replayed
from tests.tui_sessions import demo_events, write_session

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;owned\x07"
HOSTILE = f"{CLEAR}{TITLE}\x9b31mred\u202eevil\rback\x00\x7f\tok ✓"


def test_visible_draws_every_control() -> None:
    out = visible(HOSTILE)
    assert out == "␛[2J␛]0;owned␇\\x9b31mred<U+202E>evil␍back␀␡\tok ✓"
    assert not any(ord(c) < 32 and c != "\t" for c in out)
    assert not any(0x7F <= ord(c) < 0xA0 for c in out)
    assert visible("plain text, ünïcödé ✓") == "plain text, ünïcödé ✓"
    assert visible_lines("a\x1b[1m\nb") == "a␛[1m\nb"


def test_printer_draws_job_line_escapes() -> None:
    import io

    out = io.StringIO()
    Printer(out=out)(Event(kind=ev.JOB_LINE, host="box",
                          payload={"run_id": "r1", "text": HOSTILE, "offset": 1}))
    line = out.getvalue()
    assert "\x1b" not in line and "\x07" not in line and "\x9b" not in line
    assert "␛[2J" in line and "␛]0;owned␇" in line


def test_a_real_job_printing_escapes_through_the_cli(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    local_console_toml(tmp_path)
    script = ("import sys; sys.stdout.write('\\x1b[2J\\x1b]0;owned\\x07cleared?\\n'); "
              "sys.stdout.write('\\x1b[31mred\\x1b[0m\\n')")
    rc = main(["jobs", "--host", "local", "launch", "--name", "esc", "--no-record", "--",
               sys.executable, "-c", script])
    out = capfd.readouterr().out
    assert rc == 0, out
    assert "\x1b" not in out and "\x07" not in out
    assert "␛[2J␛]0;owned␇cleared?" in out and "␛[31mred␛[0m" in out


async def test_tui_log_view_draws_escapes(tmp_path: Path) -> None:
    events = demo_events()
    last = max(i for i, e in enumerate(events) if e.kind == ev.JOB_LINE)
    e = events[last]
    events[last] = Event(kind=e.kind, host=e.host, ts=e.ts, payload={**e.payload, "text": HOSTILE})
    async with replayed(write_session(tmp_path / "s.jsonl", events), start_screen="pipeline") as (app, _):
        log = app.query_one(LogView)
        height = log.scrollable_content_region.height
        shown = [log.render_line(y).text for y in range(height)]
        assert any("␛[2J␛]0;owned␇" in line for line in shown), shown
        assert not any(ch in line for line in shown for ch in ("\x1b", "\x07", "\x9b", "\r"))


def test_error_lines_quoting_the_box_are_drawn(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / f"c{CLEAR}.toml"  # a name is text too; here the error quotes it
    assert main(["hosts", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "␛[2J" in err
    assert os.sep in err
