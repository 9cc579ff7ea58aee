"""Smoke test: the real console in a real terminal (tmux), driven by keys, read by capture-pane."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.local_box import local_console_toml
from tests.tui_sessions import demo_session

# tmux is installed by scripts/ensure-tools.sh (`make test`); without it these fail, never skip.
pytestmark = [pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]


class Tmux:
    def __init__(self) -> None:
        self.socket = f"tui-{uuid.uuid4().hex[:8]}"

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              timeout=20).stdout

    def start(self, name: str, argv: list[str], size: tuple[int, int] = (120, 36)) -> None:
        # pytest exports COLUMNS/LINES (80x24 in a pipe), which Textual would take over the pty's
        # real size: the console must see the terminal tmux gives it.
        cmd = " ".join(f"'{a}'" for a in argv)
        subprocess.run(["tmux", "-L", self.socket, "new-session", "-d", "-s", name, "-x", str(size[0]),
                        "-y", str(size[1]),
                        "-c", str(ROOT), f"cd '{ROOT}' && unset COLUMNS LINES && TERM=xterm-256color {cmd}"],
                       check=True, timeout=20)

    def screen(self, name: str) -> str:
        return self.tmux("capture-pane", "-p", "-t", name)

    def keys(self, name: str, *keys: str) -> None:
        for k in keys:
            self.tmux("send-keys", "-t", name, k)
            time.sleep(0.15)

    def wait(self, name: str, text: str, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            screen = self.screen(name)
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not on screen after {timeout}s:\n{self.screen(name)}")

    def wait_gone(self, name: str, text: str, timeout: float = 30.0) -> None:
        """Wait until `text` has left the screen. After Escape, the next key waits for this:
        an ESC and a key that reach the terminal in one read are one Alt+key to Textual (on
        a loaded machine, the 0.15 s between keys is not enough to keep them apart)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text not in self.screen(name):
                return
            time.sleep(0.2)
        raise AssertionError(f"{text!r} still on screen after {timeout}s:\n{self.screen(name)}")

    def alive(self, name: str) -> bool:
        return subprocess.run(["tmux", "-L", self.socket, "has-session", "-t", name],
                              capture_output=True, timeout=20).returncode == 0

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=20)


def local_only_config(tmp_path: Path) -> Path:
    """No remote hosts: the built-in local host only, on a workdir of its own (the default one
    holds the runs other tests left there, and the Pipeline screen would show the last of them)."""
    return local_console_toml(tmp_path)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    t = Tmux()
    yield t
    t.kill()


def test_replay_and_live_console_in_a_real_terminal(tmux: Tmux, tmp_path: Path) -> None:
    session = demo_session(tmp_path / "demo.jsonl")
    tmux.start("replay", [sys.executable, "-m", "console", "replay", str(session)])
    tmux.wait("replay", "EAGLE-3 console")
    tmux.wait("replay", "Markers")
    tmux.keys("replay", ">", ">")  # 1x -> 10x -> max
    tmux.wait("replay", "replay ended 89/89")
    tmux.keys("replay", "5")
    screen = tmux.wait("replay", "850 tok/s")  # 3 significant digits
    assert "prepare" in screen and "100.0%" in screen and "extract: batch 4" in screen
    tmux.keys("replay", "q")
    end = time.monotonic() + 15
    while tmux.alive("replay") and time.monotonic() < end:
        time.sleep(0.2)
    assert not tmux.alive("replay"), "q did not quit the console"

    config = local_only_config(tmp_path)
    tmux.start("live", [sys.executable, "-m", "console", "--config", str(config)])
    tmux.wait("live", "not connected")
    tmux.keys("live", "c")
    screen = tmux.wait("live", "● live")
    assert "local" in screen and "(this machine)" in screen
    tmux.keys("live", "q")


REPLAY_SCREENS = [("1", "Hosts in this recording"), ("2", "GPUs (2)"), ("3", "Environment:"), ("4", "Recipes"),
                  ("5", "evaluate"), ("6", "GPU history"), ("7", "Offline acceptance"), ("8", "Markers")]
LIVE_SCREENS = [("2", "cpu"), ("3", "Environment:"), ("4", "No plan yet"), ("5", "no run yet"),
                ("6", "Host history"), ("7", "Offline acceptance"), ("1", "c connects")]


def test_every_screen_in_a_small_real_terminal(tmux: Tmux, tmp_path: Path) -> None:
    """80x24, the smallest terminal the console must be usable in: every screen of a replay and
    of the live local host, the help and the notes, with the tab bar and footer on screen."""
    session = demo_session(tmp_path / "demo.jsonl")
    tmux.start("replay", [sys.executable, "-m", "console", "replay", str(session)], size=(80, 24))
    tmux.wait("replay", "Markers")
    tmux.keys("replay", ">", ">")
    tmux.wait("replay", "ended 89/89")
    for key, text in REPLAY_SCREENS:
        tmux.keys("replay", key)
        screen = tmux.wait("replay", text)
        lines = screen.splitlines()
        assert "8 Replay" in lines[1], f"the tab bar overflows:\n{screen}"
        # every key name (the titles of the well-known keys go first when they do not all fit)
        assert "?/f1" in lines[-1] and " q " in lines[-1] and " 0 " in f"{lines[-1]} ", f"no footer:\n{screen}"
    tmux.keys("replay", "?")
    tmux.wait("replay", "Keys (replay)")
    tmux.wait("replay", "esc/q/?  Close")  # the footer is the dialog's
    tmux.keys("replay", "Escape")
    tmux.wait_gone("replay", "Keys (replay)")
    tmux.keys("replay", "q")

    config = local_only_config(tmp_path)
    tmux.start("live", [sys.executable, "-m", "console", "--config", str(config)], size=(80, 24))
    tmux.wait("live", "not connected")
    tmux.keys("live", "c")
    tmux.wait("live", "● live")
    for key, text in LIVE_SCREENS:
        tmux.keys("live", key)
        tmux.wait("live", text)
    tmux.keys("live", "n")
    tmux.wait("live", "Notifications on local")
    tmux.keys("live", "Escape")
    tmux.wait_gone("live", "Notifications on local")
    tmux.keys("live", "q")
    end = time.monotonic() + 15
    while tmux.alive("live") and time.monotonic() < end:
        time.sleep(0.2)
    assert not tmux.alive("live"), "q did not quit the console (no job was running)"
