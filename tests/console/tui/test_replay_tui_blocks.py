"""The TUI replaying a session whose log was recorded as job.lines records: the state it folds
while playing and after a seek is the state of folding every job.line event one by one."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from console.sessions.reader import SessionReader
from console.tui.app import ConsoleApp
from console.tui.model import ConsoleState
from remote.spine.events import Event
from tests.tui_helpers import SIZE, finish_replay, plain, replay_app, settle, wait_for
from tests.tui_sessions import HOST, demo_with_blocks


def _session(path: Path) -> list[Event]:
    return demo_with_blocks(path, 20, (
        ("r-train", [f"train: step {b}.{i}" for i in range(90)],
         list(range(90 * b + 1, 90 * b + 91)), f"block {b}" if b % 4 == 3 else None)
        for b in range(12)))


def _log(state: ConsoleState) -> tuple[int, int, list[str]]:
    job = state.host(HOST).jobs["r-train"]
    return job.tail.total, job.tail.offset, job.tail.window(0, 10**6)


def _status(app: ConsoleApp) -> str:
    """The replay screen's status line as the user reads it."""
    return plain(app.query_one("#replay-status", Static))


async def test_tui_replay_and_seek_of_block_records(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    flat = _session(path)
    full = ConsoleState([HOST])
    full.apply_all(flat)
    app = replay_app(path, start_screen="replay")
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app, ConsoleApp)
        await finish_replay(pilot)
        assert app.state.events_seen == len(flat)
        records = len(app.replayer.reader)
        assert records < len(flat)  # 12 blocks of 90 lines, one record each
        # the replay screen counts what it steps through (records) and what it has shown
        await wait_for(pilot, lambda: f"record {records}/{records} ({len(flat):,} events)"
                       in _status(app))
        assert _log(app.state) == _log(full) and _log(full)[0] == 12 * 90
        await wait_for(pilot, lambda: app.checkpoints is not None and app.checkpoints.complete)
        with SessionReader(path) as reader:
            marker = reader.markers()[-2]  # after block 7: 8 blocks of 90 lines before it
            before = [len(reader.record(i)) for i in range(marker + 1)]
        app.seek(marker + 1)
        await settle(pilot)
        await wait_for(pilot, lambda: not app.seeking)
        assert app.state.events_seen == sum(before)
        partial = ConsoleState([HOST])
        partial.apply_all(flat[: sum(before)])
        assert _log(app.state) == _log(partial) and _log(partial)[0] == 8 * 90
        assert app.replay_status().endswith(f"{marker + 1}/{len(app.replayer.reader)}")
        await wait_for(pilot, lambda: f"record {marker + 1}/{records} ({sum(before):,} events)"
                       in _status(app))
