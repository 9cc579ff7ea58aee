"""Session file I/O: open+index and seek-to-middle for a large session.

Writes N events (default 1,000,000), then measures, in the same run:
- open+index with SessionReader, against a baseline that reads the file with json.loads line by
  line (what a naive reader would do to find events);
- seek to the middle by time (index_at_time + event), against the baseline's scan to the same
  event.
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

from console.session import SessionReader, SessionWriter
from remote.events import Event, parse_ts, utc_now


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
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
