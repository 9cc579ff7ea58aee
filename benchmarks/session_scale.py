"""A day-long session: open, paint, seek, and its compressed size (issue 17).

Generates a session of N events (default 15,000,000: 8 hours of a 500 lines/s training log
plus one 8-GPU stats sample every 100 ms, and a marker every 10 minutes), then measures in the
same run:
- open: SessionReader with no index beside the file (it scans and writes one) and with it,
  against main's index build (an mmap.find per line into an offsets array) and against a plain
  newline scan (read 16 MiB chunks, count newlines: the floor of any scan), in wall time and
  in CPU time (the scan alone, as `replay --print` opens, and scan + markers + index);
- first paint of the TUI on that session (in process, headless), open included, against an
  empty Textual app;
- seek: 200 random times (index_at_time, then the event there) and 200 random positions;
- the TUI's own seek, which folds every event before the new position into a fresh state:
  its cost per event on a slice, and what that makes a seek to the middle;
- compressed (first --zstd-events events, default 1,000,000): the recorder's .jsonl.zst
  (frames by size, blocks by time) against `zstd -3` of the same bytes and against the old
  recorder (a job.line line and a zstd block per event); its open and seek.
Targets: open+paint < 2 s, seek < 100 ms, compressed size <= 1.5x zstd -3.
The day is recorded by the console's recorder (a Recorder on an EventBus, in a subprocess
killed with SIGKILL at the end): each second's 500 log lines are one JobLines block, as the job
tail publishes them, so one job.lines record (docs/sessions.md); 15 M events are about 0.3 M
records. Positions, seeks and the newline scan count records; the per-event figures count
events (log lines, samples, markers). `generate` still writes the old one-record-per-event
format, the worst case of a replay's load, for the TUI benchmarks that replay a slice.

    python benchmarks/session_scale.py [--events N] [--zstd-events N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from array import array
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from _common import children_cpu  # first: the repository root on sys.path
from session_day import day_batches, record_and_kill

from console.sessions import index as session_index
from console.sessions.index import index_path
from console.sessions.reader import SessionReader
from console.sessions.writer import SessionWriter


def mains_index(path: Path) -> int:
    """main's SessionReader._build_index, as it was."""
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        offsets: array[int] = array("q")
        append, find = offsets.append, mm.find
        pos = find(b"\n") + 1
        size = len(mm)
        while pos < size:
            nl = find(b"\n", pos)
            if nl < 0:
                break
            append(pos)
            pos = nl + 1
        n = len(offsets)
        mm.close()
    return n


def newline_scan(path: Path) -> int:
    n = 0
    with open(path, "rb", buffering=0) as fh:
        while chunk := fh.read(16 << 20):
            n += chunk.count(b"\n")
    return n - 1


def cpu_opens(path: Path, baseline: Callable[[], float]) -> tuple[float, float, float]:
    """CPU-seconds of the baseline (which counts its own) and of the two cold opens, the best
    of three each, interleaved so that a change in the machine's load hits all alike."""
    base, scan, cold = [], [], []
    for _ in range(3):
        base.append(baseline())
        for write_index, into in ((False, scan), (True, cold)):
            index_path(path).unlink(missing_ok=True)
            t = time.process_time()
            SessionReader(path, write_index=write_index).close()
            into.append(time.process_time() - t)
    return min(base), min(scan), min(cold)


def newline_cpu(path: Path) -> float:
    t = time.process_time()
    newline_scan(path)
    return time.process_time() - t


def timed(fn, *args, **kw):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t, out


def seeks(reader: SessionReader, rnd: random.Random) -> tuple[list[float], list[float]]:
    n = len(reader)
    t_first, t_last = reader.time_of(0), reader.time_of(n - 1)
    span = (t_last - t_first).total_seconds()
    by_time, by_index = [], []
    for _ in range(200):
        when = t_first + timedelta(seconds=rnd.uniform(0, span))
        t = time.perf_counter()
        i = reader.index_at_time(when)
        if i < n:
            reader.event(i)
        by_time.append(time.perf_counter() - t)
        j = rnd.randrange(n)
        t = time.perf_counter()
        reader.event(j)
        by_index.append(time.perf_counter() - t)
    return by_time, by_index


def killed_opens(path: Path, journal: bytes, reps: int = 3
                 ) -> tuple[list[float], list[float], int, int]:
    """Opens as the first one after a kill -9 (the recorder's journal beside the file, put back
    each time since that open replaces it with the complete index): wall and CPU seconds."""
    walls, cpus = [], []
    resumed = n = 0
    for _ in range(reps):
        index_path(path).write_bytes(journal)
        t, c = time.perf_counter(), time.process_time()
        reader = SessionReader(path)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
        assert not reader.index_reused and reader.resumed_events > 0
        resumed, n = reader.resumed_events, len(reader)
        reader.close()
    return walls, cpus, resumed, n


def kill_part(path: Path, journal: bytes, records: int, *, t_nl: float | None = None,
              t_clean: float | None = None) -> None:
    """The first open after the recorder was killed, beside the open with the complete index a
    clean close leaves and the plain newline scan (both measured here unless given)."""
    if t_nl is None:
        t_nl, n_nl = timed(newline_scan, path)
        assert n_nl == records
    if t_clean is None:
        index_path(path).unlink(missing_ok=True)
        SessionReader(path, write_index=True).close()
        t_clean = statistics.median(timed(lambda: SessionReader(path).close())[0]
                                    for _ in range(3))
    walls, cpus, resumed, n = killed_opens(path, journal)
    assert n == records, (n, records)
    wall = statistics.median(walls)
    print(f"open after kill -9 of the recorder (its live index, {len(journal) / 1e3:.0f} kB; "
          f"{resumed:,} of {n:,} records covered, the rest scanned; complete index written): "
          f"median {wall * 1e3:.1f} ms (CPU {statistics.median(cpus) * 1e3:.1f} ms)   index "
          f"beside it (clean close) {t_clean * 1e3:.1f} ms (x{wall / t_clean:.1f})   plain "
          f"newline scan {t_nl:.2f} s (x{t_nl / wall:,.0f} faster)   target open < 2 s: "
          f"{'met' if wall < 2 else 'MISSED'}")
    index_path(path).write_bytes(journal)
    reader = SessionReader(path)
    by_time, by_index = seeks(reader, random.Random(4))
    reader.close()
    print(f"seek after kill -9 (200 random): by time max {max(by_time) * 1e3:.2f} ms   by "
          f"position max {max(by_index) * 1e3:.2f} ms")
    paint, base = tui_paint(path, journal)
    print(f"TUI open + first paint after kill -9 (in process, headless, median of 3): "
          f"{paint:.2f} s   empty Textual app {base:.2f} s (x{paint / base:.1f})   target < 2 s: "
          f"{'met' if paint < 2 else 'MISSED'}")
    index_path(path).unlink(missing_ok=True)
    SessionReader(path, write_index=True).close()


def tui_paint(path: Path, journal: bytes | None = None) -> tuple[float, float]:
    from textual.app import App
    from tui_first_paint import EmptyApp, first_paint

    from console.tui.app import ConsoleApp
    from console.tui.controller import ReplaySource

    readers: list[SessionReader] = []

    def make() -> App[object]:
        if journal is not None:  # as a killed recorder left it, each time
            index_path(path).write_bytes(journal)
        readers.append(SessionReader(path))
        return ConsoleApp(ReplaySource(readers[-1], speed=1.0, paused=True))

    asyncio.run(first_paint(EmptyApp))
    base = statistics.median(asyncio.run(first_paint(EmptyApp)) for _ in range(3))
    ours = statistics.median(asyncio.run(first_paint(make)) for _ in range(3))
    for r in readers:
        r.close()
    return ours, base


def fold_cost(reader: SessionReader, count: int) -> float:
    """Seconds per event of folding the session's first records, up to `count` events, as
    the TUI's fold does (ConsoleState.apply_batch per record: a log block in one go)."""
    from console.tui.model import ConsoleState

    state = ConsoleState(["box"])
    t = time.perf_counter()
    for batch in reader.records():
        state.apply_batch(batch)
        if state.events_seen >= count:
            break
    return (time.perf_counter() - t) / state.events_seen


def zstd_part(out_dir: Path, n: int) -> None:
    """The first `n` events of such a day recorded compressed, as the recorder writes them."""
    import zstandard

    batches = list(day_batches(n))
    path = out_dir / "part.jsonl.zst"
    t = time.perf_counter()
    w = SessionWriter(path, ["box"])
    for batch in batches:
        w.write_many(batch)
    t_write = time.perf_counter() - t
    # What a kill -9 at this moment leaves: the bytes on disk and the recorder's live index.
    killed = out_dir / "part-killed.jsonl.zst"
    shutil.copyfile(path, killed)
    shutil.copyfile(index_path(path), index_path(killed))
    w.close()
    with open(path, "rb") as fh:
        body = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True).readall()
    src = out_dir / "part.jsonl"
    src.write_bytes(body)
    records = body.count(b"\n") - 1
    if shutil.which("zstd"):
        subprocess.run(["zstd", "-q", "-3", "-f", str(src), "-o", str(src) + ".ref.zst"],
                       check=True)
        ref = Path(str(src) + ".ref.zst").stat().st_size
        ref_name = "zstd -3 (CLI)"
    else:
        ref = len(zstandard.ZstdCompressor(level=3).compress(body))
        ref_name = "zstd level 3 (library)"
    # The recorder before log blocks and frames: a job.line line per event, a block per event.
    old = out_dir / "old.jsonl.zst"
    with open(old, "wb") as raw:
        zw = zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=False)
        zw.write(body[: body.index(b"\n") + 1])
        for batch in batches:
            for e in batch:
                zw.write(e.to_json().encode() + b"\n")
                zw.flush(zstandard.FLUSH_BLOCK)
        zw.close()
    size, old_size = path.stat().st_size, old.stat().st_size
    print(f"compressed, {n:,} events, {records:,} records ({len(body) / 1e6:.0f} MB plain): recorder "
          f"{size / 1e6:.1f} MB   {ref_name} {ref / 1e6:.1f} MB   x{size / ref:.2f} of it "
          f"(target <= 1.5: {'met' if size <= 1.5 * ref else 'MISSED'})   old recorder (line and block "
          f"per event) {old_size / 1e6:.1f} MB (x{old_size / ref:.2f})   write {t_write:.1f} s")
    t_first, reader = timed(SessionReader, path)
    assert reader.index_reused
    want = (len(reader), reader.markers())
    reader.close()
    t_rec = statistics.median(timed(lambda: SessionReader(path).close())[0] for _ in range(3))
    print(f"compressed open right after the recorder closed (the index it left): first "
          f"{t_first * 1e3:.1f} ms, then median {t_rec * 1e3:.1f} ms")
    killed_journal = index_path(killed).read_bytes()
    walls, _, resumed, n = killed_opens(killed, killed_journal)
    t_kill = statistics.median(walls)
    print(f"compressed open after kill -9 (its live index, the open frame scanned): median "
          f"{t_kill * 1e3:.1f} ms (x{t_kill / t_rec:.1f} of the clean close's)   "
          f"{resumed:,} of {n:,} records covered")
    index_path(killed).write_bytes(killed_journal)
    with SessionReader(killed, write_index=False) as reader:
        assert reader.resumed_events == resumed and len(reader) <= want[0]
        assert reader.markers() == [m for m in want[1] if m < len(reader)]
    if shutil.which("zstd"):
        def zstd_cpu() -> float:
            before = children_cpu()
            subprocess.run(f"zstd -dc '{path}' | wc -l", shell=True, check=True,
                           stdout=subprocess.DEVNULL)
            return children_cpu() - before

        base, scan, cold = cpu_opens(path, zstd_cpu)
        index_path(path).unlink(missing_ok=True)
        print(f"compressed open, CPU-s: `zstd -dc | wc -l` {base:.2f}   scan only "
              f"(replay --print) {scan:.2f} (x{scan / base:.2f})   scan + "
              f"markers + write index {cold:.2f} (x{cold / base:.2f})")
    t_open, reader = timed(SessionReader, path, write_index=False)
    by_time, by_index = seeks(reader, random.Random(2))
    print(f"compressed open (scan, no index): {t_open:.2f} s   seek by time p50 "
          f"{statistics.median(by_time) * 1e3:.1f} ms max {max(by_time) * 1e3:.1f} ms   "
          f"by index max {max(by_index) * 1e3:.1f} ms")
    reader.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=15_000_000)
    ap.add_argument("--zstd-events", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="generate (or reuse) the session here")
    ap.add_argument("--kill-only", action="store_true",
                    help="only the opens after kill -9 and their baselines")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    d = args.keep or Path(tmp.name)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"day-{args.events}.jsonl"
    kept_journal = d / f"day-{args.events}.jsonl.journal"
    kept_counts = d / f"day-{args.events}.jsonl.counts"
    if not (path.exists() and kept_journal.exists() and kept_counts.exists()):
        path.unlink(missing_ok=True)
        t_gen, (records, events) = timed(record_and_kill, path, args.events)
        print(f"recorded {events:,} events through the recorder (live index on), then "
              f"SIGKILL: {t_gen:.0f} s")
        if not index_path(path).exists():
            raise SystemExit(f"{events:,} events make {path.stat().st_size / 1e6:.1f} MB: too "
                             f"small for the recorder to keep a live index (it starts at "
                             f"{session_index.MIN_BYTES >> 20} MiB); use --events 500000 or more")
        shutil.copyfile(index_path(path), kept_journal)
        kept_counts.write_text(f"{records} {events}\n")
    records, events = map(int, kept_counts.read_text().split())
    assert events == args.events, (events, args.events)
    journal = kept_journal.read_bytes()
    index_path(path).unlink(missing_ok=True)
    size = path.stat().st_size
    print(f"session: {events:,} events in {records:,} records (a log block is one job.lines "
          f"record), {size / 1e9:.2f} GB ({size / events:.0f} B/event)")

    if args.kill_only:
        kill_part(path, journal, records)
        tmp.cleanup()
        return
    t_nl, n_nl = timed(newline_scan, path)
    t_main, n_main = timed(mains_index, path)
    t_cold, reader = timed(SessionReader, path, write_index=True)
    n = len(reader)
    assert n == n_nl == n_main == records, (n, n_nl, n_main, records)
    reader.close()
    cpu_nl, cpu_scan, cpu_cold = cpu_opens(path, lambda: newline_cpu(path))
    print(f"open, no index, CPU-s (what a loaded machine cannot hide): plain newline scan "
          f"{cpu_nl:.2f}   scan only (replay --print) {cpu_scan:.2f} (x{cpu_scan / cpu_nl:.2f})   "
          f"scan + markers + write index {cpu_cold:.2f} (x{cpu_cold / cpu_nl:.2f})")
    t_warm, reader = timed(SessionReader, path)
    assert reader.index_reused
    print(f"open, no index (scan + write index): {t_cold:.2f} s   plain newline scan: "
          f"{t_nl:.2f} s (x{t_cold / t_nl:.2f})   main's index build: {t_main:.2f} s "
          f"(x{t_cold / t_main:.2f})")
    print(f"open, index beside it: {t_warm * 1e3:.1f} ms   vs newline scan x{t_nl / t_warm:,.0f} "
          f"faster, vs main x{t_main / t_warm:,.0f} faster   markers: {len(reader.markers())}")
    by_time, by_index = seeks(reader, random.Random(1))
    print(f"seek by time (200 random): p50 {statistics.median(by_time) * 1e3:.2f} ms, max "
          f"{max(by_time) * 1e3:.2f} ms   by position: p50 "
          f"{statistics.median(by_index) * 1e3:.2f} ms, max {max(by_index) * 1e3:.2f} ms   "
          f"target < 100 ms: {'met' if max(by_time + by_index) < 0.1 else 'MISSED'}")
    reader.close()
    kill_part(path, journal, records, t_nl=t_nl, t_clean=t_warm)
    reader = SessionReader(path)
    assert reader.index_reused
    per_event = fold_cost(reader, 200_000)
    print(f"TUI seek without its state checkpoints (a fold of every event before the "
          f"position, a block at a time): {per_event * 1e6:.1f} us/event -> "
          f"{per_event * events / 2:.0f} s to the middle of this session; the TUI seeks from "
          f"checkpoints built in the background (benchmarks/replay_seek.py), whose build folds "
          f"every event once: about {per_event * events:.0f} CPU-s here")
    reader.close()
    paint, base = tui_paint(path)
    print(f"TUI open + first paint (in process, headless, median of 3): {paint:.2f} s   empty "
          f"Textual app {base:.2f} s (x{paint / base:.1f})   target < 2 s: "
          f"{'met' if paint < 2 else 'MISSED'}")
    zstd_part(d, min(args.zstd_events, args.events))
    for p in d.glob("part*"):
        p.unlink()
    (d / "old.jsonl.zst").unlink(missing_ok=True)
    tmp.cleanup()


if __name__ == "__main__":
    main()
