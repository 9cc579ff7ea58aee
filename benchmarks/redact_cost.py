"""What masking secrets (remote/spine/redact.py) costs a recorded session, against no redaction
measured in the same run on the same events.

Two inputs, each published onto a bus with the console's recorder attached (the path every
headless command and the TUI take), once with the redactor and once without, alternated, best
of --repeat:
- real-shaped: the events of the project's recorded sessions (tests/tui_sessions.demo_events:
  connect, probes, a patch, stages with their log; tests/chart_sessions.chart_events: 8-GPU
  stats samples, training progress, bench points), the demo's log lines published in blocks
  as a job tail publishes them, repeated to --copies;
- synthetic: a training log at 500 lines a block (N lines, default 500,000) where one line in
  a thousand carries a secret (`export HF_TOKEN=hf_...`), plus an argv with a Bearer header.
Prints, per input: events, seconds with and without, the ratio, and the secrets masked.

    python benchmarks/redact_cost.py [--lines N] [--copies K] [--repeat R]
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from itertools import groupby
from pathlib import Path

from _common import int_options  # first: the repository on sys.path

from console.sessions.recorder import Recorder
from console.sessions.writer import SessionWriter
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event, JobLines
from remote.spine.redact import Redactor
from tests.chart_sessions import chart_events
from tests.tui_sessions import demo_events

Item = Event | JobLines
JOB = "train"  # not a stage: the synthetic job's name


def real_shaped(copies: int) -> list[Item]:
    """The recorded sessions' events, log lines regrouped into the blocks a tail publishes."""
    items: list[Item] = []
    for events in (demo_events(log_lines=2000), chart_events(gpus=8)):
        for is_line, group in groupby(events, key=lambda e: e.kind == ev.JOB_LINE):
            run = list(group)
            items.extend([_block(run)] if is_line else run)
    return items * copies


def _block(lines: list[Event]) -> JobLines:
    p = lines[0].payload
    return JobLines(lines[0].host, p.get("run_id", ""), p.get("name", ""),
                    [str(e.payload.get("text", "")) for e in lines],
                    [int(e.payload.get("offset", i)) for i, e in enumerate(lines)], lines[0].ts)


def synthetic(n: int) -> list[Item]:
    items: list[Item] = [Event.checked(ev.JOB_STARTED, "box", {
        "run_id": "r1", "name": JOB, "argv": ["curl", "-H", "Authorization: Bearer "
                                                  "hf_aB3dE6gH9jK2mN5pQ8sT1vW4", "x"]})]
    for start in range(0, n, 500):
        texts = [f"step {i} loss 0.{i % 9973:04d} lr 2e-5 grad 1.{i % 97:02d}"
                 if i % 1000 != 999 else "export HF_TOKEN=hf_aB3dE6gH9jK2mN5pQ8sT1vW4"
                 for i in range(start, min(n, start + 500))]
        items.append(JobLines("box", "r1", JOB, texts,
                              list(range(start * 48, (start + len(texts)) * 48, 48))))
    return items


def count(items: list[Item]) -> int:
    return sum(len(i) if isinstance(i, JobLines) else 1 for i in items)


def record(items: list[Item], redact: bool, tmp: Path) -> tuple[float, int]:
    """Seconds to publish `items` onto a recorded bus (the file closed), and secrets masked."""
    redactor = Redactor() if redact else None
    bus = EventBus(redactor=redactor)
    path = tmp / f"s{int(redact)}.jsonl"
    for old in (path, *tmp.glob(path.name + ".*")):  # the last round's file and its index
        old.unlink(missing_ok=True)
    recorder = Recorder(SessionWriter(path, ["box"])).attach(bus)
    publish: dict[bool, Callable[..., object]] = {True: bus.publish_many, False: bus.publish}
    t0 = time.perf_counter()
    for item in items:
        publish[isinstance(item, JobLines)](item)
    recorder.close()
    return time.perf_counter() - t0, redactor.total if redactor else 0


def measure(name: str, items: list[Item], repeat: int) -> None:
    best = {False: float("inf"), True: float("inf")}
    masked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            for redact in (False, True):
                seconds, n = record(items, redact, Path(tmp))
                best[redact] = min(best[redact], seconds)
                masked = max(masked, n)
    ratio = best[True] / best[False]
    print(f"{name:12s} {count(items):>9,} events  without {best[False]:7.3f} s  "
          f"with {best[True]:7.3f} s  ratio {ratio:5.3f}  masked {masked:,}")


def main() -> None:
    args = int_options(__doc__.split("\n\n")[0], lines=500_000, copies=20, repeat=3)
    print("recording with the redactor vs without (same events, same run; ratio = with/without)")
    measure("real-shaped", real_shaped(args.copies), args.repeat)
    measure("synthetic", synthetic(args.lines), args.repeat)


if __name__ == "__main__":
    main()
