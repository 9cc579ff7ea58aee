"""Replay seek from state checkpoints gives the state a fold from the first event gives, and
`[`/`]` find the same markers from the cached list as a scan does."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.sessions.reader import SessionReader
from console.sessions.replay import Replayer
from console.tui.checkpoints import StateCheckpoints
from console.tui.model import ConsoleState
from console.tui.tail import LogTail
from pipeline.progress import PREFIX as RECORD_PREFIX
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests.tui_sessions import HOST, Block, demo_events, demo_with_blocks, write_session


def _view(state: ConsoleState) -> tuple[object, ...]:
    h = state.host(HOST)
    return (state.events_seen, state.last_ts, [m[2] for m in state.markers], h.connection,
            {name: (s.status, s.done, s.total) for name, s in h.stages.items()},
            {run: (j.state, j.tail.total, j.tail.window(0, 10**6)) for run, j in h.jobs.items()},
            {f: (p.status, p.sha256, p.in_effect) for f, p in h.patches.items()},
            {i: list(g.util) for i, g in h.gpus.items()}, h.stats_reason)


def test_state_from_checkpoints_is_the_state_of_a_full_fold(tmp_path: Path) -> None:
    events = demo_events(log_lines=300)
    path = write_session(tmp_path / "s.jsonl", events)
    cp = StateCheckpoints(path, [HOST], every=7)  # many checkpoints in a short session
    cp.build()
    assert cp.complete and len(cp) > 10
    with SessionReader(path) as reader:
        n = len(reader)
        for position in (0, 1, 6, 7, 8, 50, 123, n // 2, n - 1, n):
            full = ConsoleState([HOST])
            full.apply_all(reader.events(0, position))
            got = cp.state_at(position)
            assert _view(got) == _view(full), position
    # a state handed out is the caller's: folding more into it leaves the checkpoints alone
    got.apply_all(events[:5])
    assert cp.state_at(n).events_seen == n
    cp.close()


def test_markers_are_read_once_and_found_by_bisection(tmp_path: Path) -> None:
    path = write_session(tmp_path / "s.jsonl", demo_events(log_lines=30))
    with SessionReader(path) as reader:
        r = Replayer(reader, EventBus())
        markers = reader.markers()
        assert len(markers) >= 3
        for position in range(len(reader) + 2):
            r.position = position
            after = [i for i in markers if i >= position]
            before = [i for i in markers if i < position - 1]
            assert r.next_marker() == (after[0] if after else None)
            assert r.previous_marker() == (before[-1] if before else None)
        assert r.markers() is r.markers()  # cached: `[`/`]` no longer rescan the file


def _full_view(state: ConsoleState) -> tuple[object, ...]:
    """_view plus both log windows of every job with all their counters."""
    h = state.host(HOST)
    tails = {(run, name): (t.total, t.dropped, t.offset, t.longest, t.version, t.window(0, 10**6))
             for run, j in h.jobs.items() for name, t in (("tail", j.tail), ("text", j.text))}
    return (_view(state), tails)


def test_light_checkpoints_seek_to_random_targets_with_wrapped_windows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints share each tail's lines instead of copying windows: a seek to any target
    (random, seeded) gives the state of a full fold, also where a window has dropped lines
    and where the shown text skips the stage records (two tails of one job, different lengths)."""
    monkeypatch.setattr(LogTail.__init__, "__defaults__", (37,))  # windows wrap in a short session
    events = demo_events(log_lines=250)
    t0 = events[-1].ts
    for i in range(300):
        text = f"{RECORD_PREFIX} {{\"i\": {i}}}" if i % 3 == 0 else f"extract: step {i}"
        events.append(Event.checked(ev.JOB_LINE, HOST, {"run_id": "r-extract", "name": "extract",
                                                         "text": text, "offset": 1000 + i}, t0))
        if i % 50 == 0:
            events.append(Event.checked(ev.MARKER, HOST, {"label": f"m{i}"}, t0))
    path = write_session(tmp_path / "s.jsonl", events)
    rng = random.Random(14)
    for every in (5, 64):
        for shared in (True, False):
            cp = StateCheckpoints(path, [HOST], every=every, shared_windows=shared)
            cp.build()
            with SessionReader(path) as reader:
                n = len(reader)
                targets = [0, n, every, every - 1, every + 1] + [rng.randrange(n + 1)
                                                                 for _ in range(40)]
                for position in targets:
                    full = ConsoleState([HOST])
                    full.apply_all(reader.events(0, position))
                    got = cp.state_at(position)
                    assert _full_view(got) == _full_view(full), (every, shared, position)
            # the windows wrapped, and differ: the test reached the cases it is about
            end = cp.state_at(n).host(HOST).jobs["r-extract"]
            assert end.tail.dropped > 0 and end.text.dropped > 0
            assert end.tail.window(0, 99) != end.text.window(0, 99)
            cp.close()


def _block_session(path: Path) -> tuple[Path, list[Event]]:
    """The demo session with its log recorded as job.lines records (blocks of 1 to 600 lines,
    stage records among them, two runs, markers and a corrupt record in between), as the
    recorder writes a tail's blocks."""
    rng = random.Random(5)

    def blocks() -> Iterator[Block]:
        offset = 0
        for b in range(60):
            size = rng.choice([1, 2, 7, 64, 600])
            texts = [f"{RECORD_PREFIX} {{\"i\": {i}}}" if i % 9 == 0 else f"step {b}.{i}"
                     for i in range(size)]
            yield (f"r-{b % 2}", texts, list(range(offset + 1, offset + size + 1)),
                   f"m{b}" if b % 10 == 0 else None)
            offset += size

    flat = demo_with_blocks(path, 40, blocks())
    with open(path, "a") as fh:  # a block record whose arrays disagree: skipped, reported
        fh.write('{"ts":"2026-12-03T04:00:00.000Z","host":"box","kind":"job.lines","payload":'
                 '{"run_id":"r-0","name":"train","texts":["x"],"offsets":[]}}\n')
    return path, flat


def test_checkpoints_fold_block_records_to_the_per_event_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Positions count records; checkpoints are `every` events apart (a block folded at once):
    a seek to any record gives the state of folding every event before it one by one, also
    when copies are thinned because the records hold many more events than `every` allows."""
    import console.tui.checkpoints as cps

    monkeypatch.setattr(LogTail.__init__, "__defaults__", (300,))  # windows wrap
    path, flat = _block_session(tmp_path / "s.jsonl")
    with SessionReader(path) as reader:
        n = len(reader)
        assert n < len(flat) / 5  # blocks: far fewer positions than events
        assert list(reader.events()) == flat
        sizes = [len(batch) for batch in reader.records()]
        assert len(sizes) == n and sizes[-1] == 0 and sum(sizes) == len(flat)
        starts = [sum(sizes[:k]) for k in range(n + 1)]  # events before each position
    for max_checkpoints in (4096, 6):
        monkeypatch.setattr(cps, "MAX_CHECKPOINTS", max_checkpoints)
        cp = StateCheckpoints(path, [HOST], every=10)
        cp.build()
        assert len(cp) <= max_checkpoints + 1
        # copies are `every` units of fold cost apart: 1 a record, 1/16 more a block line
        cost = [0]
        for size in sizes:
            cost.append(cost[-1] + 1 + size // cps.BLOCK_LINES_PER_EVENT)
        gaps = [cost[b] - cost[a] for a, b in zip(cp._positions, cp._positions[1:],
                                                   strict=False)]
        if max_checkpoints > 100:  # not thinned: `every` units and one record at most apart
            assert len(gaps) > 5 and max(gaps) <= cp.every + 1 + 512 // 16 and cp.every == 10
        else:  # thinned: fewer copies, further apart
            assert len(gaps) >= 3 and cp.every > 10
        with SessionReader(path) as reader:
            for position in sorted({0, 1, n - 1, n, *random.Random(3).sample(range(n), 25)}):
                full = ConsoleState([HOST])
                full.apply_all(flat[: starts[position]])  # event by event
                got = cp.state_at(position)
                assert got.events_seen == starts[position]
                assert _full_view(got) == _full_view(full), (max_checkpoints, position)
        cp.close()


def test_replay_of_block_records_publishes_blocks_and_lands_on_markers(tmp_path: Path) -> None:
    """The replayer publishes a block as the live tail did (one publish_many); markers and
    seek-by-time land on the right records."""
    path, flat = _block_session(tmp_path / "s.jsonl")
    bus = EventBus()
    batches: list[int] = []
    bus.add_batch_callback(lambda es: batches.append(len(es)))
    with SessionReader(path) as reader:
        r = Replayer(reader, bus)
        while r.step() is not None:
            pass
        assert r.published == len(flat) and sum(batches) == len(flat)
        # a 600-line block is two records (RECORD_LINES at most); the corrupt one is skipped
        assert max(batches) == 512 and len(batches) == len(reader) - 1
        assert any("1 texts but 0 offsets" in w for w in reader.warnings)
        markers = reader.markers()
        assert [reader.event(i).payload.get("label") for i in markers][-6:] == [
            f"m{b}" for b in range(0, 60, 10)]
        r.seek_index(0)
        for m in markers:
            assert r.next_marker() == m
            r.seek_index(m + 1)
        when = reader.time_of(markers[0])
        at = reader.index_at_time(when)
        assert reader.time_of(at) >= when and (at == 0 or reader.time_of(at - 1) < when)
