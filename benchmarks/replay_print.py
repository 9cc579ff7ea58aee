"""`console replay --print` / `--json` throughput, and how fast a closed pipe ends it.

Writes the same day (a training log in blocks of 500 or 50 lines, 500 lines a second, plus ten
eight-GPU stats samples a second; N events, default 1,000,000, counted as log LINES plus
samples, the issue's unit) in two session formats, and measures in the same run:
- the record formats side by side: "lines" (one job.line record per log line, what sessions
  recorded before job.lines records; every such file must still replay the same) and
  "blocks" (a log block as one job.lines record, what the recorder writes now), at 500- and
  50-line blocks, `--print` opened with and without the index beside the file, and `--json`;
  each is the CPU time of `print_session` (what the command runs) to /dev/null, opening
  included, and the printed bytes of the two formats are checked equal;
- `console replay FILE --print | head -2` as a real pipeline on the blocks file: the child's
  CPU-seconds and exit status against the full replay's, and that stderr stays empty;
- with `--routes`, the C-speed routes tried for --print before the format changed, alternated
  with the current path on the same segments held in memory (benchmarks/replay_routes.py;
  `--routes-only` prints only these).
Target: >= 1 M events per CPU-second.

    python benchmarks/replay_print.py [--events N] [--batch LINES ...] [--routes] [--routes-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from _common import ROOT

from console.commands.replay import print_session
from console.printer import Printer
from console.sessions import index as session_index
from console.sessions.reader import SessionReader
from console.sessions.writer import SessionWriter
from remote.spine.events import Event, JobLines, utc_now


def write_day(path: Path, n: int, batch: int = 500, *, blocks: bool = True,
              t0: datetime | None = None) -> None:
    """500 log lines a second in batches of `batch` lines (one per ssh read), ten 8-GPU
    samples a second. `blocks=False`: each log line its own job.line record, as sessions were
    recorded before job.lines records (the bytes JobLines.to_jsonl makes, one write a block)."""
    t0 = t0 or utc_now()
    with SessionWriter(path, ["box"]) as w:
        if not blocks:
            w.write_many = partial(_write_lines, w)  # type: ignore[method-assign]
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
                w.write(Event("stats.sample", "box", {"host": {}, "gpus": [
                    {"index": g, "util": (second + g) % 100, "mem_used": 1000 + g, "mem_total": 8e4,
                     "power": 300.5} for g in range(8)]}, ts + timedelta(milliseconds=100 * tick)))
                written += 1
            second += 1


def _write_lines(w: SessionWriter, events: JobLines) -> None:
    w._write_bytes(events.to_jsonl().encode("utf-8"), len(events))
    w.count += len(events)


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

    from console.sessions.human_log import _human

    gc.disable()  # as print_session does
    with SessionReader(path, write_index=False) as r, open(os.devnull, "wb") as out:
        for first, _count, data in r.segment_data():
            bad: list[tuple[int, str]] = []
            text = _human(None, data, first, bad)
            if text:
                out.write(("\n".join(text) + "\n").encode("utf-8", "replace"))
    gc.enable()


# -- C-speed routes tried for the human printer (issue 17), each timed on the same in-memory
# segments as the current path, alternated. The regex and msgspec ones are lower bounds: they
# do only their core step (no fallback, no bad-line report, no sanitising), so a complete
# printer built on them would be slower still.

def child_cpu(cmd: str) -> tuple[float, int, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used, res.returncode, res.stderr


def replay_cpu(path: Path, *, as_json: bool, index: bool, digest: bool = False
               ) -> tuple[float, bytes]:
    """CPU seconds of `replay --print`/`--json` to /dev/null (open included), with or without
    the index beside the file; with `digest`, a hash of what was printed instead (that pass
    is not a timing: hashing is not what the command pays)."""
    import hashlib

    idx = session_index.index_path(path)
    if index and not idx.exists():
        SessionReader(path, write_index=True).close()  # what a first open (or the recorder) left
    if not index:
        idx.unlink(missing_ok=True)

    class _Digest:
        def __init__(self) -> None:
            self.h = hashlib.sha256()

        def write(self, data: bytes) -> None:
            self.h.update(data)

        def flush(self) -> None:
            pass

    out: Any = _Digest() if digest else open(os.devnull, "wb")
    t = time.process_time()
    with SessionReader(path, write_index=False) as r:
        assert r.index_reused == index
        bad = print_session(r, out, as_json=as_json)
    used = time.process_time() - t
    assert bad == [], bad[:3]
    if digest:
        return used, out.h.digest()
    out.close()
    return used, b""


def formats(d: Path, n: int, batches: list[int], rounds: int) -> Path:
    """The grid: lines vs blocks, per batch size, --print with and without the index, --json.
    Returns the blocks session of the first batch size (for the pipe figures)."""
    import gc

    keep: Path | None = None
    t0 = utc_now()
    for batch in batches:
        paths = {}
        for fmt in ("lines", "blocks"):
            paths[fmt] = d / f"day-{batch}-{fmt}.jsonl"
            write_day(paths[fmt], n, batch, blocks=fmt == "blocks", t0=t0)
        keep = keep or paths["blocks"]
        print(f"\n{n:,} events ({n - n // 51:,} or so log lines), log blocks of {batch} lines; "
              f"file: lines {paths['lines'].stat().st_size / 1e6:.0f} MB, blocks "
              f"{paths['blocks'].stat().st_size / 1e6:.0f} MB")
        modes = [("--print, index", False, True), ("--print, no index", False, False),
                 ("--json, no index", True, False)]
        spent: dict[tuple[str, str], float] = {}
        digests: dict[tuple[str, str], bytes] = {}
        gc.collect()
        for k in range(rounds):  # alternated, the best of `rounds`: the machine is shared
            for fmt in (("lines", "blocks") if k % 2 == 0 else ("blocks", "lines")):
                for mode, as_json, index in modes:
                    key = (fmt, mode)
                    if k == 0:
                        digests[key] = replay_cpu(paths[fmt], as_json=as_json, index=index,
                                                  digest=True)[1]
                    used, _ = replay_cpu(paths[fmt], as_json=as_json, index=index)
                    spent[key] = min(spent.get(key, float("inf")), used)
        for mode, _as_json, _index in modes:
            old, new = spent[("lines", mode)], spent[("blocks", mode)]
            same = digests[("lines", mode)] == digests[("blocks", mode)]
            print(f"  {mode:<18} lines {n / old / 1e6:5.2f} M events/CPU-s ({old:.2f} CPU-s)   "
                  f"blocks {n / new / 1e6:5.2f} M events/CPU-s ({new:.2f} CPU-s)   "
                  f"x{old / new:.1f}   output {'identical' if same else 'records as written'}"
                  f"   target >= 1 M: {'met' if n / new >= 1e6 else 'MISSED'}")
            if not mode.startswith("--json"):
                assert same, f"{mode}: the two formats printed different text"
        for fmt in ("lines",):
            paths[fmt].unlink()
    assert keep is not None
    return keep


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, nargs="+", default=[500, 50],
                    help="log lines per recorded batch (500: one a second; 50: ten a second)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--routes", action="store_true",
                    help="also the C-speed routes tried against the per-line path")
    ap.add_argument("--routes-only", action="store_true",
                    help="only the C-speed routes tried against the per-line path")
    args = ap.parse_args()
    if args.routes or args.routes_only:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "day.jsonl"
            write_day(path, args.events, args.batch[0], blocks=False)
            from replay_routes import routes

            routes(path, args.events)
        if args.routes_only:
            return
    with tempfile.TemporaryDirectory() as d:
        path = formats(Path(d), args.events, args.batch, args.rounds)
        print()
        for extra in ("", " --json"):
            q = f"'{path}'"
            full, rc_full, _ = child_cpu(f"{sys.executable} -m console replay {q} --print{extra}"
                                         " > /dev/null")
            head, rc_head, err = child_cpu(f"{sys.executable} -m console replay {q} --print{extra}"
                                           " | head -2 > /dev/null")
            startup, _, _ = child_cpu(f"{sys.executable} -m console --help > /dev/null")
            print(f"blocks file, | head -2 (--print{extra}): {head:.2f} CPU-s, exit {rc_head}, "
                  f"stderr {'empty' if not err else repr(err[:80])}   full replay: {full:.2f} "
                  f"CPU-s (exit {rc_full})   console --help alone: {startup:.2f} CPU-s")


if __name__ == "__main__":
    main()
