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
  the code of 3294b4f, reproduced here), in CPU time.
Prints figures and ratios. Target: open+index under 2 s on the 2-core reference machine.

    python benchmarks/session_io.py [--events N] [--zstd]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from json.encoder import encode_basestring_ascii

from console.session import SessionReader, SessionWriter
from remote.events import Event, JobLines, parse_ts, to_jsonl, utc_now


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
        made.append((JobLines("bench", "r1", "train", texts, offsets,
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--encode-only", action="store_true", help="only the to_jsonl figures")
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
