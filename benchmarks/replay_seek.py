"""Replay seek: the console state at any point of a long session.

Writes N events (default 1,000,000: job log lines with stats samples, stage progress and markers
mixed in), then measures in the same run:
- seek as it was: fold every event from the first to the target (ConsoleState.apply_all);
- seek from state checkpoints (console/tui/checkpoints.py), over random targets, in CPU and
  wall time, both ways in the same run: full copies of the state (128 at most, as before) and
  light copies sharing the log windows (every 512 events); the nearest copy before the target,
  then at most `every` events. The checkpoints are built once in the background when a replay
  opens (their build time is printed too);
- `[` / `]`: the next marker from the cached marker list (a bisect) against a rescan of the file.
Prints figures and ratios. Target: a seek under 100 ms for 1M events.

    python benchmarks/replay_seek.py [--events N]
"""

from __future__ import annotations

import random
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from _common import int_options  # first: the repository on sys.path

from console.sessions.reader import SessionReader
from console.sessions.writer import SessionWriter
from console.tui.checkpoints import StateCheckpoints
from console.tui.model import ConsoleState
from pipeline.stages import TRAIN
from remote.spine import events as ev
from remote.spine.events import Event, JobLines, utc_now


def write(path: Path, n: int) -> None:
    t0 = utc_now()
    block = 1000
    with SessionWriter(path, ["box"]) as w:
        for start in range(0, n, block):
            ts = t0 + timedelta(milliseconds=start)
            texts = [f"step {i} loss 0.123" for i in range(start, start + block - 3)]
            w.write_many(JobLines("box", "r1", "train", texts,  # not a stage: the synthetic job's name
                                  [24 * (i + 1) for i in range(start, start + len(texts))], ts))
            w.write(Event(ev.STAGE_PROGRESS, "box", {"stage": TRAIN, "done": start,
                                                     "total": n, "unit": "steps"}, ts))
            w.write(Event(ev.STATS_SAMPLE, "box", {"source": "none", "host": {
                "cpu": 10.0, "mem_used": 1, "mem_total": 2, "load1": 0.5}, "gpus": []}, ts))
            w.write(Event(ev.MARKER, "box", {"label": f"block {start}"}, ts))


def seek_times(cp: StateCheckpoints, targets: list[int], starts: list[int]
               ) -> tuple[list[float], list[float]]:
    """CPU and wall seconds of each seek, sorted; each state checked against its target
    (positions count records: `starts[p]` events come before position p)."""
    cpu, wall = [], []
    for target in targets:
        c, w = time.process_time(), time.perf_counter()
        state = cp.state_at(target)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
        assert state.events_seen == starts[target], (state.events_seen, target)
    return sorted(cpu), sorted(wall)


def main() -> None:
    args = int_options(events=1_000_000, seeks=200, seed=14)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.jsonl"
        write(path, args.events)
        reader = SessionReader(path)
        n = len(reader)
        starts = [0]  # events before each position (a log block is one record)
        for batch in reader.records():
            starts.append(starts[-1] + len(batch))
        rng = random.Random(args.seed)
        targets = [rng.randrange(n + 1) for _ in range(args.seeks)]

        t = time.perf_counter()
        ConsoleState(["box"]).apply_all(reader.events(0, n // 2))
        t_fold = time.perf_counter() - t

        results = {}
        for name, shared in (("full copies (before)", False), ("shared windows (now)", True)):
            cp = StateCheckpoints(path, ["box"], shared_windows=shared)
            c, t = time.process_time(), time.perf_counter()
            cp.build()
            build = (time.process_time() - c, time.perf_counter() - t)
            results[name] = (len(cp), cp.every, build, *seek_times(cp, targets, starts))
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

    def ms(v: float) -> str:
        return f"{v * 1e3:7.1f}"

    print(f"events: {starts[-1]:,} in {n:,} records (log blocks as job.lines records)   "
          f"seeks: {len(targets)} random targets (seed {args.seed})")
    print(f"seek, fold from the start to the middle: {t_fold * 1e3:9.1f} ms wall")
    print(f"{'':22} {'copies':>6} {'every':>6} {'build cpu s':>11}   "
          f"{'cpu median':>10} {'cpu worst':>9}   {'wall median':>11} {'wall worst':>10}  (ms)")
    for name, (count, every, build, cpu, wall) in results.items():
        print(f"{name:22} {count:6} {every:6} {build[0]:11.1f}   {ms(cpu[len(cpu) // 2]):>10} "
              f"{ms(cpu[-1]):>9}   {ms(wall[len(wall) // 2]):>11} {ms(wall[-1]):>10}")
    (_, _, _, cpu_old, wall_old), (_, _, _, cpu_new, wall_new) = results.values()
    print(f"ratio before/now: cpu median {cpu_old[len(cpu_old) // 2] / cpu_new[len(cpu_new) // 2]:.1f}x, "
          f"cpu worst {cpu_old[-1] / cpu_new[-1]:.1f}x, wall worst {wall_old[-1] / wall_new[-1]:.1f}x"
          f"   target (worst wall < 100 ms): {'met' if wall_new[-1] < 0.1 else 'MISSED'}")
    print(f"next marker, cached + bisect: {t_marker * 1e6:.1f} us   rescan of the file: "
          f"{t_rescan * 1e3:.0f} ms   ratio: {t_rescan / t_marker:,.0f}x faster")


if __name__ == "__main__":
    main()
