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
- with `--routes`, the C-speed routes tried for --print before the format changed (a regex over
  a whole block, msgspec decoding a block into structs, a projection of the block-record
  format), alternated with the current path on the same segments held in memory
  (`--routes-only` prints only these).
Target: >= 1 M events per CPU-second.

    python benchmarks/replay_print.py [--events N] [--batch LINES ...] [--routes] [--routes-only]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any

import msgspec
from _common import ROOT

from console.commands.replay import print_session
from console.printer import Printer
from console.sessions import index as session_index
from console.sessions.files import SessionReader, SessionWriter
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
                w.write(Event("stats.sample", "box", {"gpus": [
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

    from console.sessions.decode import _human

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

_TS = r'\{"ts":"[0-9]{4}-[0-9]{2}-[0-9]{2}T([0-9]{2}:[0-9]{2}:[0-9]{2})\.[0-9]{3}Z"'
_JOB_SHAPE = re.compile(
    "^" + _TS + r',"host":"([^"\\\x00-\x1f]+)","kind":"job\.line","payload":\{"run_id":"'
    r'([^"\\\x00-\x1f]{0,20})[^"\\\x00-\x1f]*","name":"[^"\\\x00-\x1f]*","text":"'
    r'(?!@@eagle3 )([^"\\\x00-\x1f]*)","offset":(?:0|[1-9][0-9]*)\}\}$|^(.*)$', re.M)
_OFFSET_TAIL = re.compile(r'","offset":(?:0|[1-9][0-9]*)\}\}$', re.M)


def route_regex_format(segs: list[tuple[int, int, bytes]]) -> None:
    """One findall over a block with the recorder's exact job-line shape (anything else lands
    in the last group, for a fallback to find), then one %-format of the whole block: the
    regex engine and the formatter do the per-line work in C. (re.sub with a template is
    worse on 3.11: the template is expanded by Python code per match.)"""
    for _first, _count, data in segs:
        found = _JOB_SHAPE.findall(data.decode("utf-8")[:-1])
        ("%s [%s] %s| %s%s\n" * len(found)) % tuple(chain.from_iterable(found))


def route_regex_tails(segs: list[tuple[int, int, bytes]]) -> None:
    """Only the offset tails of a block removed by one regex substitution with a literal
    (C-expanded) replacement: the cheapest regex pass a block printer would need."""
    for _first, _count, data in segs:
        _OFFSET_TAIL.subn("", data.decode("utf-8")[:-1])


def route_msgspec(segs: list[tuple[int, int, bytes]]) -> None:
    """A block decoded as one JSON array into structs holding only the printed fields
    (session_decode._LINES), then formatted by one join over a generator."""
    from console.sessions.decode import _LINES

    for _first, _count, data in segs:
        recs = _LINES.decode(b"[" + data[:-1].replace(b"\n", b",") + b"]")
        "\n".join(f"{r.ts[11:19]} [{r.host}] {(r.payload.run_id or '')[:20]}| {r.payload.text}"
                  for r in recs if r.kind == "job.line")


class _Batch(msgspec.Struct, gc=False):
    texts: list[str] = msgspec.field(default_factory=list)
    run_id: str = ""


class _BatchLine(msgspec.Struct, gc=False):
    ts: str
    kind: str
    payload: _Batch | None = None
    host: str = ""


_BATCH_LINES = msgspec.json.Decoder(list[_BatchLine])


def as_batch_records(segs: list[tuple[int, int, bytes]]) -> list[bytes]:
    """The same events with each log batch as ONE record holding its texts as a JSON array (a
    record-format change, NOT what the recorder writes): what --print would then decode."""
    out = []
    for _first, _count, data in segs:
        lines: list[bytes] = []
        batch: dict[str, Any] | None = None
        for raw in data.split(b"\n")[:-1]:
            ev = json.loads(raw)
            p = ev["payload"]
            if ev["kind"] == "job.line" and batch is not None and batch["ts"] == ev["ts"] \
                    and batch["payload"]["run_id"] == p["run_id"]:
                batch["payload"]["texts"].append(p["text"])
                continue
            if batch is not None:
                lines.append(json.dumps(batch, separators=(",", ":")).encode())
                batch = None
            if ev["kind"] == "job.line":
                batch = {"ts": ev["ts"], "host": ev["host"], "kind": "job.lines", "payload": {
                    "run_id": p["run_id"], "name": p["name"], "texts": [p["text"]],
                    "offset": p["offset"]}}
            else:
                lines.append(raw)
        if batch is not None:
            lines.append(json.dumps(batch, separators=(",", ":")).encode())
        out.append(b"[" + b",".join(lines) + b"]")
    return out


def route_batch_records(blobs: list[bytes]) -> None:
    """Printing the batch-record format: one msgspec decode per block, then per batch one
    join of its texts (no per-line Python object but the decoded text itself)."""
    for blob in blobs:
        print_batch_records(blob)


def print_batch_records(blob: bytes) -> bytes:
    parts = []
    for r in _BATCH_LINES.decode(blob):
        if r.kind == "job.lines" and r.payload is not None:
            head = f"{r.ts[11:19]} [{r.host}] {r.payload.run_id[:20]}| "
            parts.append(head + ("\n" + head).join(r.payload.texts))
    return ("\n".join(parts) + "\n").encode()


def route_current(segs: list[tuple[int, int, bytes]]) -> None:
    from console.sessions.decode import human_text

    for first, count, data in segs:
        bad: list[tuple[int, str]] = []
        (human_text(data, first, count, bad) + "\n").encode("utf-8", "replace")


def routes(path: Path, n: int, rounds: int = 3) -> None:
    import gc

    with SessionReader(path) as r:
        segs = list(r.segment_data())
    blobs = as_batch_records(segs)
    from console.sessions.decode import human_text

    # the projection prints what --print prints (stats samples of the day are quiet)
    assert print_batch_records(blobs[0]) == (human_text(segs[0][2], 0, segs[0][1], []) + "\n"
                                             ).encode()
    tried: dict[str, Any] = {
        "line-per-event file, --print path (human_text + encode)": partial(route_current, segs),
        "regex findall + one %-format (shape only)": partial(route_regex_format, segs),
        "regex sub of offset tails only": partial(route_regex_tails, segs),
        "msgspec block -> structs + one join": partial(route_msgspec, segs),
        "batch-record projection (what job.lines records became)":
            partial(route_batch_records, blobs),
    }
    spent = dict.fromkeys(tried, 0.0)
    gc.disable()
    for k in range(rounds):  # alternated: the machine is shared
        for name in (list(tried) if k % 2 == 0 else list(reversed(tried))):
            spent[name] += cpu(tried[name])
    gc.enable()
    base = next(iter(spent.values()))
    print(f"routes on the same in-memory segments ({rounds} alternating rounds; decode "
          "included, open excluded):")
    for name, used in spent.items():
        print(f"  {name:<68} {n * rounds / used / 1e6:5.2f} M events/CPU-s   "
              f"time x{used / base:.2f} of the first")


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
