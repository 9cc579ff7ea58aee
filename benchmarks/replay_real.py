"""`console replay` on a session shaped like a real run, each figure beside its baseline from
the same run.

The session is the recorded demo run (benchmarks/data/demo-run.jsonl, see
benchmarks/real_session.py) repeated to N records with increasing timestamps: about half
job.line (mostly stage records), a third stage.progress, the rest stage, job, console and
connection events. Measured:
- cold open: `console replay F --print | head -2` without the index beside the file (one pass
  builds it and writes it), against the same with the index it left, and `console --help`
  (the interpreter's and the CLI's start alone); wall seconds to the exit;
- `--print` and `--json` in process (CPU of print_session to /dev/null, open with the index
  included), against the per-event printer (json.loads + Event + printer.Printer, what
  `replay --print` did before the fast paths) on the first `--baseline` records of the same
  file. Targets: first event <= 0.5 s at 500k, >= 1 M records per CPU-second. (The fast
  path before its templates, 21a2846, was measured beside this one in the same run while the
  templates were written: docs/measurements.md keeps those figures.)

    python benchmarks/replay_real.py [--records 500000] [--baseline 50000] [--rounds 2]
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import int_options, shell
from real_session import write_repeated

from console.commands.replay import print_session
from console.printer import Printer
from console.sessions import index as session_index
from console.sessions.decode import decode_record
from console.sessions.reader import SessionReader


def _wall(cmd: str) -> float:
    took, _, rc, err = shell(cmd)
    assert rc == 0 and not err, (cmd, rc, err[-300:])
    return took


def cold_open(path: Path, rounds: int) -> None:
    q = f"{sys.executable} -m console"
    head = f"{q} replay '{path}' --print | head -2 > /dev/null"
    cold, warm, startup = [], [], []
    for _ in range(rounds):
        session_index.index_path(path).unlink(missing_ok=True)
        cold.append(_wall(head))
        assert session_index.index_path(path).exists(), "the cold open left no index"
        warm.append(_wall(head))
        startup.append(_wall(f"{q} --help > /dev/null"))
    c, w, s = min(cold), min(warm), min(startup)
    print(f"first event, no index:  {c:.2f} s wall   with the index it wrote: {w:.2f} s   "
          f"console --help alone: {s:.2f} s   cold/warm x{c / w:.1f}   "
          f"target <= 0.5 s: {'met' if c <= 0.5 else 'MISSED'}")


def print_cpu(path: Path, as_json: bool) -> float:
    gc.collect()
    t = time.process_time()
    with SessionReader(path) as r, open(os.devnull, "wb") as out:
        assert r.index_reused
        bad = print_session(r, out, as_json=as_json)
    assert bad == [], bad[:3]
    return time.process_time() - t


def per_event_cpu(path: Path, records: int, as_json: bool) -> float:
    """The per-event printer over the first `records` records (the baseline)."""
    gc.collect()
    t = time.process_time()
    with open(os.devnull, "w") as out, open(path, "rb") as fh:
        printer = Printer(as_json=as_json, out=out)
        fh.readline()
        for _, line in zip(range(records), fh, strict=False):
            for e in decode_record(line):
                printer(e)
    return time.process_time() - t


def main() -> None:
    args = int_options(records=500_000, baseline=50_000, rounds=2)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "real.jsonl"
        n = write_repeated(path, args.records)
        size = path.stat().st_size
        if size < session_index.MIN_BYTES:  # no index is kept: no cold and warm open to compare
            need = -(-n * session_index.MIN_BYTES // size)
            raise SystemExit(f"{n:,} records make {size / 1e6:.0f} MB, under the "
                             f"{session_index.MIN_BYTES >> 20} MiB from which a reader keeps an "
                             f"index (console/sessions/index.py): use --records {need:,} or more")
        print(f"a recorded demo run repeated to {n:,} records "
              f"({size / 1e6:.0f} MB); machine load average "
              f"{os.getloadavg()[0]:.2f}")
        cold_open(path, args.rounds)
        base_n = min(args.baseline, n)
        for mode, as_json in (("--print", False), ("--json", True)):
            fast = min(print_cpu(path, as_json) for _ in range(args.rounds))
            slow = min(per_event_cpu(path, base_n, as_json) for _ in range(args.rounds))
            rate, base = n / fast / 1e6, base_n / slow / 1e6
            print(f"{mode:<8} {rate:5.2f} M records/CPU-s ({fast:.2f} CPU-s)   per-event printer "
                  f"{base:5.2f} M/CPU-s (first {base_n:,})   x{rate / base:.1f}   "
                  f"target >= 1 M: {'met' if rate >= 1 else 'MISSED'}")


if __name__ == "__main__":
    main()
