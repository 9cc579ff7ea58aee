"""`console replay --print` / `--json` throughput, and how fast a closed pipe ends it.

Writes a session of N events (default 1,000,000) in the shape of a real day (a training log in
blocks of 500 lines a second plus eight-GPU stats samples), then measures in the same run:
- CPU-seconds for the whole replay to /dev/null, through `print_session` (what the command
  runs), against the per-event path main used (json.loads + Event + Printer per line) and,
  for --print, against the typed segment decode it used before log lines were cut from their
  bytes;
- `console replay FILE --print | head -2` as a real pipeline: the child's CPU-seconds and exit
  status against the full replay's, and that stderr stays empty;
- --print with the index the recorder left beside the file at close, against a floor (the
  same open, then every segment decoded, split into lines, joined and written back: what any
  printer handling a line as a Python object pays).
Target: >= 1 M events per CPU-second.

    python benchmarks/replay_print.py [--events N] [--batch LINES]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console import session_index  # noqa: E402
from console.commands.replay import print_session  # noqa: E402
from console.printer import Printer  # noqa: E402
from console.session import SessionReader, SessionWriter  # noqa: E402
from remote.events import Event, JobLines, utc_now  # noqa: E402


def write_day(path: Path, n: int, batch: int = 500) -> None:
    """500 log lines a second in batches of `batch` lines (one per ssh read), ten 8-GPU
    samples a second."""
    t0 = utc_now()
    with SessionWriter(path, ["box"]) as w:
        written, second = 0, 0
        while written < n:
            ts = t0 + timedelta(seconds=second)
            for start in range(0, 500, batch):
                block = min(batch, 500 - start, n - written)
                if block <= 0:
                    break
                w.write_many(JobLines(
                    "box", "20261202-120000-train-abcdef", "train",
                    [f"step {written + i} loss {1 / (written + i + 1):.6f} lr 2e-5"
                     for i in range(block)], list(range(written, written + block)),
                    ts + timedelta(milliseconds=start)))
                written += block
            for tick in range(10):
                if written >= n:
                    break
                w.write(Event("stats.sample", "box", {"gpus": [
                    {"index": g, "util": (second + g) % 100, "mem_used": 1000 + g, "mem_total": 8e4,
                     "power": 300.5} for g in range(8)]}, ts + timedelta(milliseconds=100 * tick)))
                written += 1
            second += 1


def main_path(path: Path, as_json: bool) -> None:
    """What main's `replay --print` did: every line through json.loads, an Event and the
    per-event Printer (which flushes per line)."""
    out = open(os.devnull, "w")
    printer = Printer(as_json=as_json, out=out)
    with open(path, "rb") as fh:
        fh.readline()
        for line in fh:
            printer(Event.from_json(line))
    out.close()


OPEN_CPU: list[float] = []


def fast_path(path: Path, as_json: bool) -> None:
    t = time.process_time()
    with SessionReader(path, write_index=False) as r, open(os.devnull, "wb") as out:
        OPEN_CPU.append(time.process_time() - t)  # a scan: no index is kept for this run
        bad = print_session(r, out, as_json=as_json)
        assert bad == [], bad[:3]


def warm_path(path: Path) -> None:
    """--print with the index beside the session (what the recorder leaves beside a session
    over session_index.MIN_BYTES at a clean close)."""
    t = time.process_time()
    with SessionReader(path, write_index=True) as r, open(os.devnull, "wb") as out:
        assert r.index_reused
        OPEN_CPU.append(time.process_time() - t)
        assert print_session(r, out, as_json=False) == []


def floor_path(path: Path) -> None:
    """Not a printer: every segment decoded, split into lines, joined and written back. Any
    printer that handles a line as a Python object pays at least this."""
    with SessionReader(path) as r, open(os.devnull, "wb") as out:
        assert r.index_reused
        for _first, _count, data in r.segment_data():
            out.write("\n".join(data.decode("utf-8").split("\n")).encode("utf-8"))


def typed_path(path: Path) -> None:
    """The --print path before job lines were cut from their bytes: every segment decoded by
    msgspec into typed records in one call (session_decode._human), then formatted."""
    import gc

    from console.session_decode import _human

    gc.disable()  # as print_session does
    with SessionReader(path, write_index=False) as r, open(os.devnull, "wb") as out:
        for first, _count, data in r.segment_data():
            bad: list[tuple[int, str]] = []
            text = _human(None, data, first, bad)
            if text:
                out.write(("\n".join(text) + "\n").encode("utf-8", "replace"))
    gc.enable()


def cpu(fn: object, *args: object) -> float:
    t = time.process_time()
    fn(*args)  # type: ignore[operator]
    return time.process_time() - t


def child_cpu(cmd: str) -> tuple[float, int, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used, res.returncode, res.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=500,
                    help="log lines per recorded batch (500: one a second; 50: ten a second)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "day.jsonl"
        write_day(path, args.events, args.batch)
        n = args.events
        print(f"session: {n:,} events, {path.stat().st_size / 1e6:.0f} MB, log batches of "
              f"{args.batch} lines")
        # The recorder left its index beside the file at close: the warm figures use it.
        warm = cpu(warm_path, path)
        floor = cpu(floor_path, path)
        print(f"replay --print with the index the recorder left: {n / warm / 1e6:5.2f} M "
              f"events/CPU-s ({warm:.2f} CPU-s, open {OPEN_CPU[-1]:.3f})   floor (decode, "
              f"split into lines, join, write; same index): {n / floor / 1e6:5.2f} M "
              f"events/CPU-s ({floor:.2f} CPU-s)   print/floor x{warm / floor:.2f}")
        session_index.index_path(path).unlink()  # the cold figures below open without it
        for as_json in (False, True):
            name = "--json " if as_json else "--print"
            base = cpu(main_path, path, as_json)
            fast = cpu(fast_path, path, as_json)
            opened = OPEN_CPU[-1]
            typed = "" if as_json else (
                f"   typed segment decode (msgspec records, as before, now sanitised too): "
                f"{n / (t := cpu(typed_path, path)) / 1e6:5.2f} M events/CPU-s (x{t / fast:.2f})")
            print(f"replay {name}: {n / fast / 1e6:5.2f} M events/CPU-s ({fast:.2f} CPU-s, of "
                  f"which opening without an index {opened:.2f}; {n / (fast - opened) / 1e6:.2f} M"
                  f"/CPU-s after it)   "
                  f"main's per-event path: {n / base / 1e6:5.3f} M events/CPU-s ({base:.2f} "
                  f"CPU-s)   x{base / fast:.1f}   target >= 1 M/CPU-s: "
                  f"{'met' if n / fast >= 1e6 else 'MISSED'}{typed}")
        for extra in ("", " --json"):
            q = f"'{path}'"
            full, rc_full, _ = child_cpu(f"{sys.executable} -m console replay {q} --print{extra}"
                                         " > /dev/null")
            head, rc_head, err = child_cpu(f"{sys.executable} -m console replay {q} --print{extra}"
                                           " | head -2 > /dev/null")
            startup, _, _ = child_cpu(f"{sys.executable} -m console --help > /dev/null")
            print(f"| head -2 (--print{extra}): {head:.2f} CPU-s, exit {rc_head}, stderr "
                  f"{'empty' if not err else repr(err[:80])}   full replay: {full:.2f} CPU-s "
                  f"(exit {rc_full})   console --help alone: {startup:.2f} CPU-s")


if __name__ == "__main__":
    main()
