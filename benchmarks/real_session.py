"""Sessions shaped like a real run: the body of a recorded `console run --demo` session
repeated to N records, its timestamps rewritten so they keep increasing.

A synthetic day (benchmarks/replay_print.py) is mostly batched log lines, the printer's
fastest case; a real pipeline run records about half job.line (most of them the stage records
the pipeline prints for the console), a third stage.progress, and connection, job, stage,
console and pipeline events around them: the slow paths a synthetic mix never takes. The
recording used is benchmarks/data/demo-run.jsonl (recorded with `console run --host local
--demo --force --session F` on this project); `--record` records a fresh one
instead (minutes: a real pipeline run, under the heavy-work lock).

    python benchmarks/real_session.py OUT.jsonl [--records N] [--record]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from _common import ROOT

from remote.spine.events import format_ts, parse_ts

RECORDED = ROOT / "benchmarks" / "data" / "demo-run.jsonl"
_TS = slice(7, 31)  # the timestamp in `{"ts":"2026-12-05T06:36:26.750Z",...`


def recorded_lines(path: Path = RECORDED) -> tuple[bytes, list[bytes]]:
    """The header line and the event lines of a recorded session (plain or .zst), as written."""
    data = path.read_bytes()
    if path.name.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    lines = [line for line in data.split(b"\n") if line]
    return lines[0], lines[1:]


def write_repeated(out: Path, records: int, source: Path = RECORDED) -> int:
    """`records` event lines: the recording's body again and again, each pass shifted by the
    recording's span (plus a second) so timestamps never go back. Returns the count written."""
    header, body = recorded_lines(source)
    times = [parse_ts(line[_TS].decode()) for line in body]
    t0 = min(times)
    span = max(times) - t0 + timedelta(seconds=1)
    # a line's bytes around its timestamp, split once; only the timestamp changes per pass
    parts = [(line[: _TS.start], line[_TS.stop :], t - t0) for line, t in zip(body, times, strict=True)]
    written = 0
    with open(out, "wb") as fh:
        fh.write(header + b"\n")
        shift = 0
        while written < records:
            base = t0 + span * shift
            chunk = []
            for head, tail, offset in parts[: records - written]:
                chunk.append(head + format_ts(base + offset).encode() + tail)
            fh.write(b"\n".join(chunk) + b"\n")
            written += len(chunk)
            shift += 1
    return written


def record_fresh(out: Path) -> None:
    """A new recording of the demo pipeline (minutes; the same lock as other heavy work)."""
    with tempfile.TemporaryDirectory() as d:
        plain = Path(d) / "demo.jsonl"
        subprocess.run(["flock", "/tmp/eagle3-heavy.lock", sys.executable, "-m", "console", "run",
                        "--host", "local", "--demo", "--force", "--session", str(plain)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        import zstandard

        out.write_bytes(zstandard.ZstdCompressor(level=19).compress(plain.read_bytes()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--record", action="store_true", help="record a fresh demo run first")
    args = ap.parse_args()
    source = RECORDED
    if args.record:
        source = args.out.with_name(args.out.name + ".recorded.zst")
        record_fresh(source)
    n = write_repeated(args.out, args.records, source)
    print(f"{args.out}: {n:,} records from {source.name}, {args.out.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
