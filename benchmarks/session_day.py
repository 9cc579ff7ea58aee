"""A day-long session, generated: the writes of 8 hours of a 500 lines/s training log with an
8-GPU stats sample every 100 ms and a marker every 10 minutes, as bytes (`generate`, the old
line-per-event format) or through the console's own recorder (`record`, `record_and_kill`).
benchmarks/session_scale.py measures it; tui_day_load.py and tui_switch_profile.py replay it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path

from _common import ROOT

from console.sessions.recorder import Recorder
from console.sessions.writer import SessionWriter
from remote.spine.bus import EventBus
from remote.spine.events import Event, JobLines, format_ts, to_jsonl, utc_now

HEADER = (b'{"format":"eagle3-console-session","version":1,"started":"%s","hosts":["box"],'
          b'"console_version":"bench"}\n')


def day_batches(n: int) -> Iterator[Sequence[Event]]:
    """The day as the bus hands it to the recorder, `n` events in all: each second a block of
    500 log lines (the job tail's publish_many: a JobLines), ten 8-GPU stats samples, and a
    marker every 10 minutes."""
    t0 = utc_now()
    run = "20261202-120000-train-abcdef"
    written = 0
    second = 0
    while written < n:
        ts = t0 + timedelta(seconds=second)
        block = min(500, n - written)
        yield JobLines("box", run, "train",  # not a stage: the synthetic job's name
                       [f"step {written + i} loss 0.{(written + i) % 9973:04d} lr 2e-5 grad "
                        f"1.{i % 97:02d}" for i in range(block)],
                       [(written + i) * 48 for i in range(block)], ts)
        written += block
        for tick in range(10):
            if written >= n:
                break
            util = (second + tick) % 100
            yield (Event("stats.sample", "box", {"host": {}, "gpus": [
                {"index": g, "name": "NVIDIA H200", "util": util, "mem_used": 70000,
                 "mem_total": 143771, "power": 512.5, "temp": 61} for g in range(8)]},
                ts + timedelta(milliseconds=100 * tick)),)
            written += 1
        if second % 600 == 0 and written < n:
            yield (Event("marker", "box", {"label": f"t+{second}s"}, ts),)
            written += 1
        second += 1


def generate(path: Path, n: int) -> None:
    """The bytes a line-per-event SessionWriter wrote for such a day, made directly: the old
    format (a job.line record per log line), the worst case of a replay's load, which
    benchmarks/tui_day_load.py and tui_switch_profile.py replay. This benchmark's day is
    recorded by the recorder itself (`record`)."""
    with open(path, "wb", buffering=1 << 22) as fh:
        fh.write(HEADER % format_ts(utc_now()).encode())
        for batch in day_batches(n):
            fh.write(to_jsonl(batch).encode())


_RECORDER = """
import sys, time
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/benchmarks"]
from session_day import record
records, events = record(sys.argv[1], int(sys.argv[2]))
print("recorded", records, events, flush=True)
time.sleep(600)
"""


def record(path: str, n: int) -> tuple[int, int]:
    """The day through the console's own recorder (a Recorder on an EventBus, its
    SessionWriter's live index included): a log block is one job.lines record, as a live
    session records it. Returns (records, events) written."""
    bus = EventBus()
    recorder = Recorder(SessionWriter(path, ["box"])).attach(bus)
    for batch in day_batches(n):
        bus.publish_many(batch)
    recorder.sync()
    assert recorder.error is None, recorder.error
    return recorder.writer._index.events, recorder.writer.count


def record_and_kill(path: Path, n: int) -> tuple[int, int]:
    """A real recorder process, killed with SIGKILL once it has written the day: what a lost
    SSH session or a crash at the end of the day leaves (no clean close, no complete index).
    Returns the (records, events) it wrote."""
    proc = subprocess.Popen([sys.executable, "-c", _RECORDER, str(path), str(n), str(ROOT)],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        word, records, events = proc.stdout.readline().split()
        assert word == b"recorded"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return int(records), int(events)
