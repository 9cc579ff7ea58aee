"""Nothing clipped: the real console in tmux at 80x24 and 200x50, every screen read back with
capture-pane, live (a first run, no console.toml) and replaying a session with data for every
screen (a long connection error, long artifact paths, every chart).

A cut word is what a right edge or Rich's ellipsis leaves: a line filling the whole width whose
last two cells are letters or digits (a word running off the screen), or "…" right after a
letter and before a space or the line's end ("…unknown host (Nam…"). A path elided in its middle
("/tmp/pyt…/out/x") is neither. The tabs read whole words, the footer names every key of the
screen (in a replay, `.`, `[`, `]`, `0`, `t`, `space`, `>` too) and the replay badge says
"replay", never "not connected yet"."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from console.tui.registry import COMMANDS, key_label
from remote.spine import events as ev
from remote.spine.events import Event
from tests.chart_sessions import chart_events
from tests.console.tui.test_tui_tmux import Tmux
from tests.tui_sessions import demo_events, write_session

pytestmark = [pytest.mark.slow]
SIZES = [(80, 24), (200, 50)]
SCREENS = ["hosts", "overview", "probes", "patch", "pipeline", "stats", "bench"]
LONG_ERROR = ("[Errno -2] unknown host (Name or service not known) while connecting to "
              "gpu-box-with-a-long-name.example.internal:22 through the jump host bastion")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    t = Tmux()
    yield t
    t.kill()


def full_session(path: Path) -> Path:
    """The demo session, every chart's data after it, long artifact paths and a connection that
    went down with a long error."""
    events = demo_events()
    last = events[-1].ts
    extra = chart_events()
    shift = last - extra[0].ts + timedelta(seconds=1)
    events += [Event(e.kind, e.host, e.payload, e.ts + shift) for e in extra if e.kind != ev.CONNECTION_UP]
    t = events[-1].ts
    deep = "/data/eagle3/runs/20261204T183628Z-pipeline-train-278e93/out/train/checkpoints"
    events.append(Event.checked(ev.STAGE_END, events[-1].host, {
        "stage": "train", "ok": True, "seconds": 24.0,
        "outputs": [f"{deep}/{i}/model.safetensors" for i in range(12)]}, t + timedelta(seconds=1)))
    events.append(Event.checked(ev.CONNECTION_DOWN, events[-1].host, {"error": LONG_ERROR},
                                t + timedelta(seconds=2)))
    return write_session(path, events)


def cut_words(screen: str, width: int) -> list[str]:
    bad = []
    for line in screen.splitlines():
        if len(line) >= width and line[width - 2:width].isalnum():
            bad.append(f"runs off the edge: {line!r}")
        for m in re.finditer(r"\w…(\s|$)", line):
            bad.append(f"cut by an ellipsis at {m.start()}: {line!r}")
    return bad


def footer_keys(mode: str, screen: str) -> list[str]:
    return [key_label(c.key) for c in COMMANDS if c.show and (
        c.group == "global" or c.group == screen or (c.group == "replay" and mode == "replay"))
        and not (c.replay_only and mode != "replay") and not (c.live_only and mode != "live")]


def check_screen(text: str, width: int, mode: str, screen: str) -> None:
    lines = text.splitlines()
    assert not cut_words(text, width), "\n".join(cut_words(text, width)) + "\n" + text
    tabs = lines[1]
    for word in ("Hosts", "Overview", "Probes", "Patch", "Pipeline", "Stats", "Bench"):
        assert re.search(rf"\b{word}\b", tabs), (word, tabs)
    footer = lines[-1]
    for key in footer_keys(mode, screen):
        assert f" {key} " in f" {footer} ", (key, footer)
    if mode == "replay":
        assert "replay" in lines[0] and "not connected yet" not in text, lines[0]


WORD = re.compile(r"[A-Za-z][\w\-]*")
EDGE = "│▎▍▌▐┃"  # a pane's border or a scrollbar: text stops there


def edge_words(screen: str, width: int) -> set[str]:
    """Words that end where the text stops: the right edge of the screen or a pane (a border,
    a scrollbar), the places a cut word ends."""
    words = set()
    for line in screen.splitlines():
        for m in WORD.finditer(line):
            after = line[m.end():m.end() + 1]
            if after in EDGE or (not after and m.end() >= width - 4):
                words.add(m.group())
    return words


def whole_words(screen: str) -> set[str]:
    return {m.group() for m in WORD.finditer(screen)}


def settled(tmux: Tmux, name: str, before: str, patience: float) -> str:
    """The screen once it differs from `before` (a key for the screen already shown changes
    nothing: waited `patience` s) and two reads 0.4 s apart agree. A fixed pause read the
    previous screen when a loaded machine (two pytest workers) painted the switch late."""
    deadline = time.monotonic() + patience
    text = tmux.screen(name)
    while text == before and time.monotonic() < deadline:
        time.sleep(0.1)
        text = tmux.screen(name)
    for _ in range(25):
        time.sleep(0.4)
        again = tmux.screen(name)
        if again == text:
            break
        text = again
    return text


def read_screens(tmux: Tmux, name: str, keys: list[str]) -> list[str]:
    shown = []
    text = tmux.screen(name)
    for key in keys:
        tmux.keys(name, key)
        text = settled(tmux, name, text, 3 if key == "1" else 20)  # a console opens on Hosts (1)
        if key == "5":  # the train stage: its long artifact paths
            tmux.keys(name, "down", "down", "down")
            text = settled(tmux, name, text, 3)
        shown.append(text)
    return shown


def check_both(small: list[str], large: list[str], mode: str, screens: list[str]) -> None:
    """Each screen at 80x24 and 200x50: the checks of check_screen, and every word at an edge
    at 80x24 is a word the same screen shows whole at 200x50 (or elsewhere at 80x24)."""
    for screen, text, wide in zip(screens, small, large, strict=True):
        check_screen(text, SIZES[0][0], mode, screen)
        check_screen(wide, SIZES[1][0], mode, screen)
        cut = edge_words(text, SIZES[0][0]) - whole_words(wide) - (whole_words(text) - edge_words(text, SIZES[0][0]))
        assert not cut, f"{screen}: cut words {sorted(cut)}\n{text}"


def test_every_replay_screen_fits(tmux: Tmux, tmp_path: Path) -> None:
    session = full_session(tmp_path / "full.jsonl")
    screens = [*SCREENS, "replay"]
    keys = [str(n) for n in range(1, len(screens) + 1)]
    shown = []
    for name, size in zip(("small", "large"), SIZES, strict=True):
        tmux.start(name, [sys.executable, "-m", "console", "replay", str(session)], size=size)
        tmux.wait(name, "EAGLE-3")
        tmux.keys(name, ">", ">")  # max speed
        tmux.wait(name, "ended")
        shown.append(read_screens(tmux, name, keys))
    pipeline = shown[0][SCREENS.index("pipeline")]
    assert "artifacts" in pipeline and "…" in pipeline and "more" in pipeline  # elided, the rest counted
    check_both(shown[0], shown[1], "replay", screens)


def test_every_live_screen_fits_on_a_first_run(tmux: Tmux, tmp_path: Path) -> None:
    """No console.toml anywhere: the Hosts screen's first-run note is read too."""
    home = tmp_path / "home"
    home.mkdir()
    argv = ["env", f"HOME={home}", f"XDG_CONFIG_HOME={home}/cfg", f"XDG_DATA_HOME={home}/data",
            sys.executable, "-m", "console", "--no-record"]
    shown = []
    for name, size in zip(("small", "large"), SIZES, strict=True):
        tmux.start(name, argv, size=size)
        text = tmux.wait(name, "No console.toml found")
        assert "console init" in " ".join(text.split())
        shown.append(read_screens(tmux, name, [str(n) for n in range(1, len(SCREENS) + 1)]))
    check_both(shown[0], shown[1], "live", SCREENS)


def test_the_fleet_screen_fits(tmux: Tmux, tmp_path: Path) -> None:
    """A replay of three boxes (the demo on each, one box's connection lost with a long error):
    the Fleet screen (9) at both sizes, every tab in view at 80 columns (the titles without
    their numbers), the lost box's error one line cut at a word."""
    events = [e for host in ("box1", "box2", "box3") for e in demo_events(host=host)]
    events.sort(key=lambda e: e.ts)
    events.append(Event.checked(ev.CONNECTION_DOWN, "box2", {"error": LONG_ERROR},
                                events[-1].ts + timedelta(seconds=1)))
    session = write_session(tmp_path / "fleet.jsonl", events, hosts=("box1", "box2", "box3"))
    shown = []
    for name, size in zip(("small", "large"), SIZES, strict=True):
        tmux.start(name, [sys.executable, "-m", "console", "replay", str(session)], size=size)
        tmux.wait(name, "EAGLE-3")
        tmux.keys(name, ">", ">")
        tmux.wait(name, "ended")
        shown.append(read_screens(tmux, name, ["9"]))
    small = shown[0][0]
    assert "Replay" in small.splitlines()[1] and "Fleet" in small.splitlines()[1], small
    assert all(f"box{i}" in small for i in (1, 2, 3)) and "✖ was down" in small, small
    assert "box2: [Errno -2] unknown host" in small, small
    check_both(shown[0], shown[1], "replay", ["fleet"])
