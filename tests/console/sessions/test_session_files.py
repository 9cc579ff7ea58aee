"""Session files at scale and under damage: zstd frames, the persistent index, bad input of
every kind (issue 17 and the session items of issue 18), all on real files and processes."""

from __future__ import annotations

import os
import random
import stat
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest
import zstandard

from console.errors import SessionFormatError
from console.sessions import source as session_source
from console.sessions import writer as session_writer
from console.sessions import zstd_scan as session_zstd_scan
from console.sessions.index import index_path
from console.sessions.reader import SessionReader
from console.sessions.writer import SessionWriter, default_session_path
from remote.spine.events import Event, utc_now

REPO = Path(__file__).resolve().parents[3]


def _day_events(n: int) -> list[Event]:
    """A log with stats samples between, in the shapes a real day records."""
    t0 = utc_now()
    out: list[Event] = []
    for i in range(n):
        ts = t0 + timedelta(milliseconds=2 * i)
        if i % 50 == 0:
            out.append(Event("stats.sample", "box", {"host": {}, "gpus": [{"index": g, "util": (i + g) % 100,
                                                              "mem_used": 1000 + i % 7} for g in range(8)]},
                             ts))
        elif i % 997 == 0:
            out.append(Event("marker", "box", {"label": f"m{i}"}, ts))
        else:
            out.append(Event("job.line", "box", {"run_id": "20261202-120000-train-abcdef",
                                                 "name": "train",
                                                 "text": f"step {i} loss {1 / (i + 1):.6f} lr 2e-5",
                                                 "offset": 40 * i}, ts))
    return out


def _write(path: Path, events: list[Event]) -> None:
    with SessionWriter(path, ["box"]) as w:
        for e in events:
            w.write(e)


def _console(*args: str, env: dict[str, str] | None = None, timeout: float = 120
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


# -- compressed sessions: size, durability, no temporary copy ----------------------------------

def test_compressed_session_is_within_1_5x_of_zstd_3(tmp_path: Path) -> None:
    events = _day_events(60_000)
    _write(tmp_path / "s.jsonl", events)
    _write(tmp_path / "s.jsonl.zst", events)
    plain = (tmp_path / "s.jsonl").read_bytes()
    reference = len(zstandard.ZstdCompressor(level=3).compress(plain))
    size = (tmp_path / "s.jsonl.zst").stat().st_size
    assert size <= 1.5 * reference, (size, reference)
    with SessionReader(tmp_path / "s.jsonl.zst") as r:
        assert list(r.events()) == events
        assert r.warnings == []


def test_opening_a_compressed_session_writes_no_temporary_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _day_events(5000)
    _write(tmp_path / "s.jsonl.zst", events)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    with SessionReader(tmp_path / "s.jsonl.zst") as r:
        assert r.event(4321) == events[4321]
        assert list(tmpdir.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl.zst", "tmp"]


_IDLE_RECORDER = textwrap.dedent(
    """
    import sys, time
    from console.sessions.writer import SessionWriter
    from remote.spine.events import Event
    w = SessionWriter(sys.argv[1], ["box"])
    for i in range(300):
        w.write(Event("job.line", "box", {"i": i, "text": "x" * (i % 50)}))
    print("ready", flush=True)
    time.sleep(60)
    """
)


def test_sigkill_of_an_idle_compressed_recorder_loses_nothing_written_a_second_before(
    tmp_path: Path,
) -> None:
    """Frames are not closed per event, so the timer must flush what waits: the events written
    more than a second before the kill are all on disk."""
    path = tmp_path / "idle.jsonl.zst"
    proc = subprocess.Popen([sys.executable, "-c", _IDLE_RECORDER, str(path)], cwd=REPO,
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(1.5)
    proc.kill()
    proc.wait()
    with SessionReader(path) as r:
        assert [e.payload["i"] for e in r.events()] == list(range(300))


def test_old_compressed_sessions_one_frame_a_block_per_event_stay_readable(tmp_path: Path) -> None:
    """What the recorder wrote before frames were closed by size: one frame, no checksum."""
    events = _day_events(300)
    _write(tmp_path / "ref.jsonl", events)
    lines = (tmp_path / "ref.jsonl").read_bytes().splitlines(keepends=True)
    path = tmp_path / "old.jsonl.zst"
    with open(path, "wb") as raw:
        zw = zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=False)
        for line in lines:
            zw.write(line)
            zw.flush(zstandard.FLUSH_BLOCK)
    with SessionReader(path) as r:
        assert list(r.events()) == events
        assert r.event(150) == events[150]
        assert r.warnings == []


# -- damage --------------------------------------------------------------------------------------

def _frames(data: bytes) -> list[tuple[int, int]]:
    out, pos = [], 0
    while pos < len(data):
        end, _complete, _ = session_source.frame_end(data, pos, len(data))
        out.append((pos, end))
        pos = end
    return out


def test_one_bad_byte_in_a_compressed_session_loses_one_frame_not_the_session(
    tmp_path: Path,
) -> None:
    events = _day_events(60_000)
    path = tmp_path / "s.jsonl.zst"
    _write(path, events)
    data = bytearray(path.read_bytes())
    frames = _frames(bytes(data))
    assert len(frames) >= 5
    start, end = frames[len(frames) // 2]
    data[(start + end) // 2] ^= 0x5A
    path.write_bytes(bytes(data))
    with SessionReader(path) as r:
        got = list(r.events())
        warnings = list(r.warnings)
    assert any(f"at byte {start:,}" in w and "damaged" in w for w in warnings), warnings
    # a prefix, then one contiguous gap (the damaged frame), then everything after it
    k = 0
    while k < len(got) and got[k] == events[k]:
        k += 1
    assert k > 0
    rest = got[k:]
    assert rest == events[len(events) - len(rest) :]
    assert 0 < len(events) - len(got) <= session_writer.FRAME_EVENTS


def test_compressed_markers_come_from_the_scan_and_follow_a_lost_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seek markers of a .jsonl.zst are found while the scan decompresses each frame (no
    second pass): the same as the plain file's and the old second pass's, and after a damaged
    frame exactly those of the events still read."""
    events = _day_events(24_000)
    plain, packed = tmp_path / "s.jsonl", tmp_path / "s.jsonl.zst"
    _write(plain, events)
    _write(packed, events)
    want = [i for i, e in enumerate(events) if e.kind == "marker"]
    assert len(want) > 10
    with SessionReader(plain, write_index=True) as r:
        assert r.markers() == want
    second_pass: list[int] = []
    decompress = session_source.Source._decompress

    def counted(self: session_source.Source, seg: session_source.Segment) -> bytes:
        second_pass.append(seg.first)
        return decompress(self, seg)

    monkeypatch.setattr(session_source.Source, "_decompress", counted)
    with SessionReader(packed, write_index=True) as r:
        assert not r.index_reused and r._markers == want  # set by the scan itself
        assert second_pass == []  # no frame decompressed twice to find them
        assert r._find_markers() == want  # what the second pass found
        assert second_pass
    data = bytearray(packed.read_bytes())
    frames = _frames(bytes(data))
    start, end = frames[len(frames) // 2]
    data[(start + end) // 2] ^= 0x5A
    packed.write_bytes(bytes(data))
    index_path(packed).unlink(missing_ok=True)
    with SessionReader(packed, write_index=True) as r:
        kept = [i for i, e in enumerate(r.events()) if e.kind == "marker"]
        assert r._markers == kept
        assert 0 < len(kept) < len(want)


def test_garbage_after_a_valid_frame_keeps_every_event(tmp_path: Path) -> None:
    events = _day_events(19)
    path = tmp_path / "s.jsonl.zst"
    _write(path, events)
    with open(path, "ab") as fh:
        fh.write(bytes(random.Random(1).randrange(256) for _ in range(100)))
    with SessionReader(path) as r:
        assert list(r.events()) == events
        assert r.warnings


@pytest.mark.slow
def test_a_small_zstd_bomb_of_newlines_is_read_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "bomb.jsonl.zst"
    header = b'{"format":"eagle3-console-session","version":1,"started":"2026-01-01T00:00:00.000Z"}\n'
    cctx = zstandard.ZstdCompressor(level=3)
    with open(path, "wb") as raw, cctx.stream_writer(raw) as zw:
        zw.write(header)
        chunk = b"\n" * (1 << 20)
        for _ in range(300):
            zw.write(chunk)
        zw.write(b'{"ts":"2026-01-01T00:00:01.000Z","host":"h","kind":"marker","payload":{}}\n')
    assert path.stat().st_size < 1 << 20
    probe = textwrap.dedent(
        """
        import sys
        from console.sessions.reader import SessionReader
        with SessionReader(sys.argv[1]) as r:
            kinds = [e.kind for e in r.events()]
        # VmHWM is this process's own peak; ru_maxrss would carry the forking pytest's (Linux
        # keeps the larger of the two across exec), about 1 GB in the full suite.
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
        print(len(kinds), kinds[-1], hwm)
        """
    )
    res = subprocess.run([sys.executable, "-c", probe, str(path)], cwd=REPO, capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    n, kind, rss_kb = res.stdout.split()
    assert (int(n), kind) == (1, "marker")
    assert int(rss_kb) < 200 * 1024  # the 300 MB it expands to never sits in memory


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "s.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(SessionFormatError, match="not a regular file"):
        SessionReader(fifo)
    res = _console("replay", str(fifo), "--print", timeout=60)
    assert res.returncode == 2
    assert "not a regular file" in res.stderr and "Traceback" not in res.stderr


def test_deep_nesting_and_a_numeric_ts_are_bad_lines_not_tracebacks(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    events = _day_events(10)
    _write(path, events)
    lines = path.read_bytes().splitlines(keepends=True)
    deep = b'{"ts":"2026-01-01T00:00:00.000Z","kind":"x","payload":{"a":' + b"[" * 200_000 \
        + b"]" * 200_000 + b"}}\n"
    numeric = b'{"ts":12,"host":"box","kind":"job.line","payload":{"text":"t"}}\n'
    path.write_bytes(b"".join([*lines[:4], deep, *lines[4:7], numeric, *lines[7:]]))
    with SessionReader(path) as r:
        assert list(r.events()) == events
        assert sum("corrupt" in w for w in r.warnings) == 2
        with pytest.raises(SessionFormatError, match="event 3 is corrupt"):
            r.event(3)
    for extra in ([], ["--json"]):
        res = _console("replay", str(path), "--print", *extra)
        assert res.returncode == 1, res.stderr  # events were lost: a partial replay (issue 33)
        assert "Traceback" not in res.stderr
        assert res.stderr.count("corrupt") == 2, res.stderr
        if extra:
            assert len(res.stdout.splitlines()) == len(events)


_MUTATIONS = ("flip", "insert", "delete", "truncate", "duplicate", "zero")


def _mutate(data: bytes, rnd: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rnd.choice((1, 1, 1, 2, 5))):
        kind = rnd.choice(_MUTATIONS)
        at = rnd.randrange(len(b)) if b else 0
        if kind == "flip" and b:
            b[at] ^= 1 << rnd.randrange(8)
        elif kind == "insert":
            b[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 20)))
        elif kind == "delete":
            del b[at : at + rnd.randrange(1, 40)]
        elif kind == "truncate":
            del b[at:]
        elif kind == "duplicate":
            b[at:at] = b[max(0, at - 64) : at]
        elif kind == "zero":
            b[at : at + 8] = bytes(len(b[at : at + 8]))
    return bytes(b)


@pytest.mark.slow
def test_fuzz_thousands_of_mutated_sessions_never_crash_or_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain and compressed, small frames so damage meets frame and block boundaries: open,
    every event, every event by index and both printers, and only SessionFormatError escapes."""
    import io

    from console.commands.replay import print_session

    monkeypatch.setattr(session_writer, "FRAME_EVENTS", 7)
    monkeypatch.setattr(session_writer, "FLUSH_S", 0.0)
    events = _day_events(40)
    originals = {}
    for suffix in (".jsonl", ".jsonl.zst"):
        _write(tmp_path / f"orig{suffix}", events)
        originals[suffix] = (tmp_path / f"orig{suffix}").read_bytes()
    rnd = random.Random(17)
    target = tmp_path / "m"
    outcomes = {"refused": 0, "read": 0}
    for n in range(3000):
        suffix = ".jsonl" if n % 2 else ".jsonl.zst"
        data = _mutate(originals[suffix], rnd)
        path = target.with_name(f"m{n % 4}{suffix}")
        path.write_bytes(data)
        try:
            r = SessionReader(path)
        except SessionFormatError:
            outcomes["refused"] += 1
            continue
        with r:
            got = list(r.events())
            assert len(got) <= len(events) + 40
            for i in range(len(r)):
                try:
                    r.event(i)
                    r.ts_at(i)
                except SessionFormatError:
                    pass
            for as_json in (False, True):
                print_session(r, io.BytesIO(), as_json=as_json)  # type: ignore[arg-type]
            if data == originals[suffix][: len(data)] and suffix == ".jsonl":
                assert got == events[: len(got)]  # a cut keeps a prefix, whole
        outcomes["read"] += 1
    assert outcomes["read"] > 1000 and outcomes["refused"] > 10, outcomes


# -- writing: names, modes, clear errors ---------------------------------------------------------

def test_session_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "s.jsonl"
    SessionWriter(path, ["box"]).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700


def test_default_session_paths_never_collide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    first = default_session_path("box")
    SessionWriter(first, ["box"]).close()
    second = default_session_path("box")
    assert second != first
    SessionWriter(second, ["box"]).close()


def test_two_commands_for_one_host_in_the_same_second_both_record(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_DATA_HOME": str(tmp_path / "data")}
    procs = [subprocess.Popen([sys.executable, "-m", "console", "run", "--host", "local"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err
    sessions = list((tmp_path / "data").rglob("*.jsonl"))
    assert len(sessions) == 3


def test_session_option_on_an_existing_file_or_unwritable_path_exits_2(tmp_path: Path) -> None:
    existing = tmp_path / "s.jsonl"
    existing.write_text("keep me\n")
    res = _console("run", "--host", "local", "--session", str(existing))
    assert res.returncode == 2, res.stderr
    assert "already exists" in res.stderr and "Traceback" not in res.stderr
    assert existing.read_text() == "keep me\n"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    res = _console("run", "--host", "local", "--session", str(blocked / "s.jsonl"))
    assert res.returncode == 2, res.stderr
    assert "cannot create session file" in res.stderr and "Traceback" not in res.stderr


# -- the index -----------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
def test_every_event_by_index_and_by_time_across_many_segments(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_source, "PLAIN_SEGMENT", 4096)
    monkeypatch.setattr(session_writer, "FRAME_EVENTS", 97)
    events = _day_events(3000)
    path = tmp_path / f"s{suffix}"
    _write(path, events)
    with SessionReader(path) as r:
        assert len(r._segments) > 20
        assert len(r) == len(events)
        order = list(range(len(events)))
        random.Random(3).shuffle(order)
        for i in order[:600]:
            assert r.event(i) == events[i]
            assert r.index_at_time(events[i].ts) == i - _same_ts_before(events, i)
        assert r.markers() == [i for i, e in enumerate(events) if e.kind == "marker"]
        assert list(r.events(1234, 2345)) == events[1234:2345]


def _same_ts_before(events: list[Event], i: int) -> int:
    n = 0
    while i - n - 1 >= 0 and events[i - n - 1].ts == events[i].ts:
        n += 1
    return n


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
def test_the_index_beside_a_session_is_reused_and_rebuilt_when_stale(
    tmp_path: Path, suffix: str
) -> None:
    events = _day_events(2000)
    path = tmp_path / f"s{suffix}"
    _write(path, events)
    with SessionReader(path, write_index=True) as r:
        assert not r.index_reused
    idx = index_path(path)
    assert stat.S_IMODE(idx.stat().st_mode) == 0o600
    with SessionReader(path, write_index=True) as r:
        assert r.index_reused
        assert list(r.events()) == events
        assert r.markers() == [i for i, e in enumerate(events) if e.kind == "marker"]
    # the session grows: the index is stale and rebuilt
    more = _day_events(10)
    _write(tmp_path / f"more{suffix}", more)
    if suffix == ".jsonl":
        with open(path, "ab") as fh:
            fh.write(b"".join((e.to_json() + "\n").encode() for e in more))
    else:
        extra = zstandard.ZstdCompressor().compress(
            b"".join((e.to_json() + "\n").encode() for e in more))
        with open(path, "ab") as fh:
            fh.write(extra)
    with SessionReader(path, write_index=True) as r:
        assert not r.index_reused
        assert len(r) == 2010
    # a damaged index is a cache miss, never an error
    idx.write_bytes(b'{"format":"eagle3-console-session-index","version":1,"segments":[[1,2')
    with SessionReader(path, write_index=False) as r:
        assert not r.index_reused and len(r) == 2010


def test_small_sessions_get_no_index_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _write(path, _day_events(100))
    SessionReader(path).close()
    assert not index_path(path).exists()


@pytest.mark.parametrize("name", ["s.jsonl", "s.jsonl.zst"])
def test_the_recorder_leaves_the_index_a_scan_would_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A clean close writes the index beside a large session (the thresholds are lowered so
    that a small one counts as large): the first open reuses it and reads what a scan reads,
    events, markers and times alike."""
    from console.sessions import index as session_index
    monkeypatch.setattr(session_index, "MIN_BYTES", 1 << 20)
    monkeypatch.setattr(session_index, "MIN_BYTES_COMPRESSED", 64 << 10)
    events = _day_events(30_000)
    path = tmp_path / name
    with SessionWriter(path, ["box"]) as w:
        for k in range(0, len(events), 700):
            batch = events[k : k + 700]
            w.write_many(batch) if k % 1400 else [w.write(e) for e in batch]
    assert index_path(path).exists()
    with SessionReader(path) as r:
        assert r.index_reused
        ours = (len(r), r.markers(), [s.as_list() for s in r._segments])
        got = list(r.events())
        picks = random.Random(3).sample(range(len(r)), 50)
        at = [r.index_at_time(events[i].ts) for i in picks]
        one = [r.event(i) for i in picks]
    assert got == events
    index_path(path).unlink()
    with SessionReader(path, write_index=True) as r:
        assert not r.index_reused
        assert (len(r), r.markers()) == ours[:2] and ours[1]
        if name.endswith(".zst"):
            assert [s.as_list() for s in r._segments] == ours[2]  # frame for frame
        assert [r.index_at_time(events[i].ts) for i in picks] == at
        assert [r.event(i) for i in picks] == one


def test_no_recorder_index_for_a_small_session_and_a_stale_one_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from console.sessions import index as session_index
    small = tmp_path / "small.jsonl"
    _write(small, _day_events(100))
    assert not index_path(small).exists()  # below session_index.MIN_BYTES
    monkeypatch.setattr(session_index, "MIN_BYTES", 1 << 20)
    path = tmp_path / "s.jsonl"
    events = _day_events(12_000)
    _write(path, events)
    assert index_path(path).exists()
    extra = Event("marker", "box", {"label": "after"}, events[-1].ts)
    with open(path, "ab") as fh:  # written after the recorder closed
        fh.write(extra.to_json().encode() + b"\n")
    with SessionReader(path) as r:
        assert not r.index_reused
        assert len(r) == len(events) + 1 and r.event(len(events)) == extra


def test_scan_hands_on_whole_lines_with_their_index_however_the_frame_is_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the zstd scan shows the marker search: every whole line once, with its event
    index, wherever decompression cut the pieces; a line that had to be carried past the
    carry limit is left out and the lines after it keep their numbers."""
    lines = [f'{{"n":{i},"pad":"{"x" * (i * 37 % 300)}"}}'.encode() for i in range(400)]
    lines[123] = b'{"long":"' + b"y" * 5000 + b'"}'
    data = b"\n".join(lines) + b"\n"
    monkeypatch.setattr(session_zstd_scan.FrameCounter, "MAX_CARRY", 4096)
    rng = random.Random(5)
    skipped = 0
    for _ in range(20):
        seen: list[tuple[int, bytes]] = []
        counter = session_zstd_scan.FrameCounter(False, lambda i, d, out=seen: out.append((i, d)),
                                          first=1000)
        pos = 0
        while pos < len(data):
            step = rng.choice([1, 7, 64, 999, 6000])
            counter.feed(data[pos : pos + step])
            pos += step
        got = [(i + k, line) for i, chunk in seen
               for k, line in enumerate(chunk.rstrip(b"\n").split(b"\n"))]
        # the long line is seen only when one piece held it whole (no carry needed)
        assert [g for g in got if g[0] != 1123] == \
            [(1000 + k, line) for k, line in enumerate(lines) if k != 123]
        assert [g for g in got if g[0] == 1123] in ([], [(1123, lines[123])])
        skipped += all(g[0] != 1123 for g in got)
        assert counter.count == len(lines)
    assert skipped  # the carry limit was reached, and the numbering held after it


def test_replay_exit_code_damage_is_1_a_torn_last_line_is_0(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33 item 4, documented in docs/sessions.md (Damage): a readable session that lost
    events to damage replays what it can, warns, and exits 1, so a script cannot take it for the
    whole session; the torn last line every killed recorder leaves only warns (exit 0)."""
    from console.cli import main

    events = _day_events(10)
    torn = tmp_path / "torn.jsonl"
    _write(torn, events)
    torn.write_bytes(torn.read_bytes() + b'{"ts":"2026-01-01T00:00:0')
    assert main(["replay", str(torn), "--print"]) == 0
    err = capsys.readouterr().err
    assert "last line is incomplete" in err and len(err.splitlines()) == 1, err
    damaged = tmp_path / "damaged.jsonl"
    _write(damaged, events)
    lines = damaged.read_bytes().splitlines(keepends=True)
    damaged.write_bytes(b"".join([*lines[:3], b"not json\n", *lines[3:]]))
    for extra in ([], ["--json"]):
        assert main(["replay", str(damaged), "--print", *extra]) == 1
        out, err = capsys.readouterr()
        assert err.startswith("warning: ") and "corrupt" in err, err
        assert len(out.splitlines()) >= len(events)  # everything readable was still shown
