"""Snapshot tests (pytest-textual-snapshot): every screen of a replayed session at 80x24 (the
smallest terminal it must be usable in) and 120x40, the help and notes screens, and the
connection states (not connected, reconnecting). The SVGs under tests/__snapshots__/ were looked
at by a human; `pytest --snapshot-update` regenerates them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from tests.tui_helpers import SIZE, finish_replay, live_app, replay_app
from tests.tui_sessions import demo_session

SnapCompare = Callable[..., bool]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_session(tmp_path_factory.mktemp("snap") / "demo.jsonl")


@pytest.fixture(scope="module")
def reconnecting_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_session(tmp_path_factory.mktemp("snap") / "reconnecting.jsonl", reconnecting=True)


async def _finished(pilot: Pilot[Any]) -> None:
    await finish_replay(pilot)


SIZES = {"80x24": (80, 24), "120x40": (120, 40)}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("screen", ["hosts", "overview", "probes", "patch", "pipeline", "stats", "bench",
                                    "replay"])
def test_screen_snapshot(snap_compare: SnapCompare, session: Path, screen: str, size: str) -> None:
    assert snap_compare(replay_app(session, start_screen=screen), terminal_size=SIZES[size],
                        run_before=_finished)


@pytest.mark.parametrize("size", list(SIZES))
def test_help_scrolls_at_every_size_snapshot(snap_compare: SnapCompare, size: str) -> None:
    assert snap_compare(live_app(start_screen="hosts"), terminal_size=SIZES[size], press=["question_mark"])


def test_reconnecting_overview_snapshot(snap_compare: SnapCompare, reconnecting_session: Path) -> None:
    assert snap_compare(replay_app(reconnecting_session, start_screen="overview"), terminal_size=SIZE,
                        run_before=_finished)


def test_not_connected_live_hosts_snapshot(snap_compare: SnapCompare) -> None:
    assert snap_compare(live_app(start_screen="hosts"), terminal_size=SIZE)


def test_help_snapshot(snap_compare: SnapCompare) -> None:
    assert snap_compare(live_app(start_screen="hosts"), terminal_size=SIZE, press=["question_mark"])
