"""Session file I/O: open+index and seek-to-middle for a large session.

Writes N events (default 1,000,000), then measures, in the same run:
- open+index with SessionReader, against a baseline that reads the file with json.loads line by
  line (what a naive reader would do to find events);
- seek to the middle by time (index_at_time + event), against the baseline's scan to the same
  event;
- encoding log blocks for the recorder (JobLines.to_records: job.lines records, what it writes
  now; JobLines.to_jsonl: a line per event, what it wrote before; 1,000-line blocks), against the
  generic path every other batch takes (one _Wire per event, encode_lines) and against the
  encoder before the typed events (shared head, json's encode_basestring_ascii per text:
  the code of 3294b4f, reproduced here), in CPU time;
- the recorder's CPU per event with its live index (the journal a kill -9 leaves, console/
  session_live_index.py) against the same recorder without it, plain and zstd, one line per
  write (the cheapest write, where the index weighs most) and 500-line blocks (log blocks),
  interleaved, best of 5, and the CPU inside the journal's own code; the journal is kept
  from the first segment on (the size threshold set to 0), its worst case.
Prints figures and ratios. Target: open+index under 2 s on the 2-core reference machine.

    python benchmarks/session_io.py [--events N] [--encode-only | --recorder-only]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import timedelta
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (the repository on sys.path)

from console.sessions.reader import SessionReader
from console.sessions.writer import SessionWriter
from remote.spine.events import Event, JobLines, parse_ts, to_jsonl, utc_now

JOB = "train"  # not a stage: the synthetic job's name


def write(path: Path, n: int) -> None:
    t0 = utc_now()
    with SessionWriter(path, ["bench"]) as w:
        for i in range(n):
            w.write(Event("job.line", "bench", {"run_id": "r1", "text": f"step {i} loss 0.123",
                                                 "offset": i * 24},
                          t0 + timedelta(milliseconds=i)))


def baseline_scan(path: Path, stop_at: int | None = None) -> int:
    count = 0
    with open(path, "rb") as fh:
        fh.readline()
        for line in fh:
            json.loads(line)
            if stop_at is not None and count == stop_at:
                return count
            count += 1
    return count


def pre_typed_to_jsonl(batch: JobLines, texts: list[str], offsets: list[int]) -> str:
    """JobLines.to_jsonl before the typed events (3294b4f): the head from a template event,
    then per line json's C string escaper and an f-string."""
    template = batch[0].to_json()
    head = template[: template.index('"text":') + len('"text":')]
    return "".join([f'{head}{encode_basestring_ascii(text)},"offset":{offset}}}}}\n'
                     for text, offset in zip(texts, offsets, strict=True)])


def encode_figures(blocks: int, size: int = 1000, repeats: int = 5) -> dict[str, float]:
    """Best-of-`repeats` CPU seconds to encode `blocks` blocks, per way."""
    t0 = utc_now()
    made = []
    for b in range(blocks):
        texts = [f"step {b * size + i} loss 0.{i:03d} lr 3e-4 tok/s 1234.5" for i in range(size)]
        offsets = [60 * (b * size + i + 1) for i in range(size)]
        made.append((JobLines("bench", "r1", JOB, texts, offsets,
                              t0 + timedelta(seconds=b)), texts, offsets))
    ways = {
        "pre-typed (3294b4f)": lambda jl, t, o: pre_typed_to_jsonl(jl, t, o),
        "generic (_Wire per event)": lambda jl, t, o: to_jsonl(jl),
        "JobLines.to_jsonl (lines)": lambda jl, t, o: jl.to_jsonl(),
        "JobLines.to_records (now)": lambda jl, t, o: jl.to_records(),
    }
    for jl, _, _ in made[:3]:
        assert jl.to_jsonl() == to_jsonl(jl)  # same bytes as the generic path
    best = {}
    for name, way in ways.items():
        times = []
        for _ in range(repeats):
            t = time.process_time()
            for jl, texts, offsets in made:
                way(jl, texts, offsets)
            times.append(time.process_time() - t)
        best[name] = min(times)
    return best


def recorder_cost(n: int, d: Path) -> None:
    """CPU seconds of SessionWriter writing `n` pre-encoded lines, live index on and off."""
    from console.sessions import index as session_index
    from console.sessions.index import index_path
    from console.sessions.live_index import LiveIndexWriter

    inside = [0.0, 0]  # CPU seconds spent in the journal's own code, and its calls
    publish = LiveIndexWriter.publish

    def timed_publish(self: LiveIndexWriter, *a: Any) -> None:
        t = time.process_time()
        publish(self, *a)
        inside[0] += time.process_time() - t
        inside[1] += 1

    t0 = utc_now()
    lines = [Event("job.line", "bench", {"run_id": "r1", "name": JOB,
                                         "text": f"step {i} loss 0.{i % 9973:04d} lr 2e-5",
                                         "offset": i * 48}, t0 + timedelta(milliseconds=i)
                   ).to_json().encode() + b"\n" for i in range(n)]
    blocks = [b"".join(lines[k : k + 500]) for k in range(0, n, 500)]
    saved = session_index.MIN_BYTES, session_index.MIN_BYTES_COMPRESSED
    session_index.MIN_BYTES = session_index.MIN_BYTES_COMPRESSED = 0
    LiveIndexWriter.publish = timed_publish  # type: ignore[method-assign]
    try:
        print(f"recorder CPU with its live index vs without ({n:,} events, "
              f"{sum(map(len, lines)) / 1e6:.0f} MB plain; best of 5, interleaved; and the CPU "
              "inside the journal's own code):")
        for suffix in (".jsonl", ".jsonl.zst"):
            for shape, writes in (("1 line a write", [(x, 1) for x in lines]),
                                  ("500-line blocks", [(b, len(b.split(b"\n")) - 1)
                                                        for b in blocks])):
                best: dict[bool, float] = {True: 1e9, False: 1e9}
                journal = 0
                inside[:] = [0.0, 0]
                for rep in range(5):
                    for live in (False, True):
                        path = d / f"rec-{rep}-{live}{suffix}"
                        t = time.process_time()
                        w = SessionWriter(path, ["bench"], live_index=live)
                        for data, count in writes:
                            w._write_bytes(data, count)
                        if live:
                            journal = index_path(path).stat().st_size
                        w.close()
                        best[live] = min(best[live], time.process_time() - t)
                        path.unlink()
                        index_path(path).unlink(missing_ok=True)
                off, on = best[False], best[True]
                print(f"  {suffix:10} {shape:16} without {off / n * 1e6:6.3f} us/event   with "
                      f"{on / n * 1e6:6.3f} us/event   extra {(on - off) / n * 1e9:+6.1f} ns/event "
                      f"(x{on / off:.3f})   journal {journal / 1e3:.0f} kB; inside it "
                      f"{inside[0] / 5 / n * 1e9:.1f} ns/event ({inside[1] // 5} rows a run)")
    finally:
        session_index.MIN_BYTES, session_index.MIN_BYTES_COMPRESSED = saved
        LiveIndexWriter.publish = publish  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--encode-only", action="store_true", help="only the to_jsonl figures")
    ap.add_argument("--recorder-only", action="store_true",
                    help="only the recorder's cost of its live index")
    args = ap.parse_args()
    if args.recorder_only:
        with tempfile.TemporaryDirectory() as d:
            recorder_cost(min(args.events, 300_000), Path(d))
        return
    lines = max(args.events // 10, 1000)
    encode = encode_figures(lines // 1000)
    base = encode["pre-typed (3294b4f)"]
    print(f"encoding {lines // 1000 * 1000:,} job lines in blocks of 1,000 (CPU, best of 5):")
    for name, secs in encode.items():
        print(f"  {name:27} {secs * 1e3:8.1f} ms  {lines / secs / 1e6:5.2f} M lines/s  "
              f"time vs pre-typed: {secs / base:.2f}x")
    if args.encode_only:
        return
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.jsonl"
        t = time.perf_counter()
        write(path, args.events)
        t_write = time.perf_counter() - t
        size = path.stat().st_size

        t = time.perf_counter()
        reader = SessionReader(path)
        n = len(reader)
        t_open = time.perf_counter() - t
        assert n == args.events, (n, args.events)

        t = time.perf_counter()
        base_n = baseline_scan(path)
        t_base = time.perf_counter() - t
        assert base_n == n

        mid = n // 2
        target = parse_ts(reader.ts_at(mid))
        t = time.perf_counter()
        i = reader.index_at_time(target)
        ev = reader.event(i)
        t_seek = time.perf_counter() - t
        assert i == mid and ev.payload["text"].startswith(f"step {mid} ")

        t = time.perf_counter()
        baseline_scan(path, stop_at=mid)
        t_base_seek = time.perf_counter() - t
        reader.close()

    print(f"events: {n:,}  file: {size / 1e6:.1f} MB  write: {t_write:.2f} s "
          f"({n / t_write:,.0f} events/s, flushed per event)")
    print(f"open+index: {t_open:.3f} s   baseline json.loads scan: {t_base:.3f} s   "
          f"ratio: {t_base / t_open:.1f}x faster   target < 2 s: "
          f"{'met' if t_open < 2 else 'MISSED'}")
    print(f"seek to middle by time: {t_seek * 1e3:.3f} ms   baseline scan to middle: "
          f"{t_base_seek * 1e3:.0f} ms   ratio: {t_base_seek / t_seek:,.0f}x faster")
    with tempfile.TemporaryDirectory() as d:
        recorder_cost(min(args.events, 300_000), Path(d))


if __name__ == "__main__":
    main()
