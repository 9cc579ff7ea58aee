"""Replay seek: the console state at any point of a long session.

Writes N events (default 1,000,000: job log lines with stats samples, stage progress and markers
mixed in), then measures in the same run:
- seek as it was: fold every event from the first to the target (ConsoleState.apply_all);
- seek from state checkpoints (console/tui/checkpoints.py): the nearest copy before the target,
  then at most `every` events; the checkpoints are built once in the background when a replay
  opens (their build time is printed too);
- `[` / `]`: the next marker from the cached marker list (a bisect) against a rescan of the file.
Prints figures and ratios. Target: a seek under 100 ms for 1M events.

    python benchmarks/replay_seek.py [--events N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.session import SessionReader, SessionWriter
from console.tui.checkpoints import StateCheckpoints
from console.tui.model import ConsoleState
from remote import events as ev
from remote.events import Event, JobLines, utc_now


def write(path: Path, n: int) -> None:
    t0 = utc_now()
    block = 1000
    with SessionWriter(path, ["box"]) as w:
        for start in range(0, n, block):
            ts = t0 + timedelta(milliseconds=start)
            texts = [f"step {i} loss 0.123" for i in range(start, start + block - 3)]
            w.write_many(JobLines("box", "r1", "train", texts,
                                  [24 * (i + 1) for i in range(start, start + len(texts))], ts))
            w.write(Event(ev.STAGE_PROGRESS, "box", {"stage": "train", "done": start,
                                                     "total": n, "unit": "steps"}, ts))
            w.write(Event(ev.STATS_SAMPLE, "box", {"source": "none", "host": {
                "cpu": 10.0, "mem_used": 1, "mem_total": 2, "load1": 0.5}, "gpus": []}, ts))
            w.write(Event(ev.MARKER, "box", {"label": f"block {start}"}, ts))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.jsonl"
        write(path, args.events)
        reader = SessionReader(path)
        n = len(reader)
        targets = [n // 2, n - 1, n // 4 + 7]

        t = time.perf_counter()
        ConsoleState(["box"]).apply_all(reader.events(0, targets[0]))
        t_fold = time.perf_counter() - t

        cp = StateCheckpoints(path, ["box"])
        t = time.perf_counter()
        cp.build()
        t_build = time.perf_counter() - t
        worst = 0.0
        for target in targets:
            t = time.perf_counter()
            state = cp.state_at(target)
            worst = max(worst, time.perf_counter() - t)
            assert state.events_seen == target, (state.events_seen, target)
        cp.close()

        markers = reader.markers()
        from bisect import bisect_left

        t = time.perf_counter()
        for _ in range(100):
            markers[bisect_left(markers, n // 2)]
        t_marker = (time.perf_counter() - t) / 100
        t = time.perf_counter()
        rescanned = reader.markers()
        t_rescan = time.perf_counter() - t
        assert rescanned == markers
        reader.close()

    print(f"events: {n:,}  checkpoints: {len(cp)} (every {cp.every})")
    print(f"seek, fold from the start to the middle: {t_fold * 1e3:9.1f} ms")
    print(f"seek from checkpoints (worst of {len(targets)}):   {worst * 1e3:9.1f} ms   "
          f"ratio: {t_fold / worst:,.0f}x faster   target < 100 ms: "
          f"{'met' if worst < 0.1 else 'MISSED'}")
    print(f"checkpoints built once in the background: {t_build:.1f} s")
    print(f"next marker, cached + bisect: {t_marker * 1e6:.1f} us   rescan of the file: "
          f"{t_rescan * 1e3:.0f} ms   ratio: {t_rescan / t_marker:,.0f}x faster")


if __name__ == "__main__":
    main()
