"""A line longer than the bound (console/sessions/source.py MAX_LINE, 64 MiB) is damage, read in
bounded memory (issue 48 row 8): a small `.jsonl.zst` that expands to one huge line took 5.2 GB
of memory in `replay --print` and 4.2 GB in `report`. Now reading a segment puts a short
stand-in where that line was, as it decompresses (console/sessions/source.py LineBound): the
line is one damaged record (one warning, exit 1), every other event of its frame and file is
read. The same for a plain `.jsonl`. Memory is the child process's peak RSS."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import zstandard

from console.sessions.writer import SessionWriter
from remote.spine.events import Event

LONG = 256 << 20  # four times the bound: enough to tell a bounded read from a whole one


def _lines(tmp_path: Path, n: int) -> list[bytes]:
    plain = tmp_path / "events.jsonl"
    with SessionWriter(plain, ["box"]) as w:
        for i in range(n):
            w.write(Event("job.line", "box", {"run_id": "r", "name": "j", "text": f"line {i}",
                                              "offset": i}))
    return plain.read_bytes().splitlines(keepends=True)


def _frame(parts: list[bytes]) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(b"".join(parts))


def _long_frame(before: bytes, after: bytes) -> bytes:
    """One frame: `before`, a LONG-byte line (streamed: never held here), `after`."""
    c = zstandard.ZstdCompressor(level=3).compressobj()
    out = [c.compress(before)]
    chunk = b"x" * (1 << 20)
    for _ in range(LONG >> 20):
        out.append(c.compress(chunk))
    out.append(c.compress(b"\n" + after))
    out.append(c.flush())
    return b"".join(out)


# RUSAGE_CHILDREN's ru_maxrss is the largest of every child a process ever waited for: in a
# pytest worker that includes earlier tests' children. A fresh wrapper process has one child.
_WRAPPER = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
            "sys.stderr.write('\\npeak-rss-kib %d\\n' % "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")


def _peak_child(argv: list[str]) -> tuple[subprocess.CompletedProcess[str], int]:
    """Runs argv; its output and its own peak RSS in bytes (read by a wrapper whose only child
    it is)."""
    done = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True,
                          text=True, timeout=600)
    head, _, kib = done.stderr.rpartition("\npeak-rss-kib ")
    assert kib.strip().isdigit(), done.stderr[-2000:]
    done.stderr = head
    return done, int(kib) * 1024


def test_a_compressed_line_past_the_bound_is_damage_read_in_bounded_memory(
        tmp_path: Path) -> None:
    header, *events = _lines(tmp_path, 7)
    path = tmp_path / "s.jsonl.zst"
    path.write_bytes(_frame([header, *events[:3]]) + _long_frame(events[3], events[4])
                     + _frame(events[5:]))
    assert path.stat().st_size < 1 << 20  # a small file
    done, peak = _peak_child([sys.executable, "-m", "console", "replay", str(path), "--print",
                              "--json"])
    assert done.returncode == 1, done.stderr  # events were lost: a script must not trust it
    texts = [json.loads(x)["payload"]["text"] for x in done.stdout.splitlines()
             if x.startswith("{") and '"job.line"' in x]
    assert texts == [f"line {i}" for i in range(7)]  # nothing else lost
    warned = [x for x in done.stderr.splitlines() if "longer than 64 MiB" in x]
    assert len(warned) == 1, done.stderr
    assert "event 4 is corrupt and was skipped (line 6): a line longer than 64 MiB" in warned[0]
    assert "Traceback" not in done.stderr
    assert peak < 600 << 20, f"peak RSS {peak >> 20} MiB"
    done, peak = _peak_child([sys.executable, "-m", "console", "report", str(path), "--out",
                              str(tmp_path / "r.html")])
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert (tmp_path / "r.html").exists() and peak < 600 << 20, f"peak RSS {peak >> 20} MiB"


def test_a_plain_line_past_the_bound_is_skipped_alone(tmp_path: Path) -> None:
    header, *events = _lines(tmp_path, 3)
    path = tmp_path / "s.jsonl"
    with path.open("wb") as fh:
        fh.write(header + events[0])
        for _ in range((65 << 20) >> 20):
            fh.write(b"y" * (1 << 20))
        fh.write(b"\n" + events[1] + events[2])
    done, peak = _peak_child([sys.executable, "-m", "console", "replay", str(path), "--print",
                              "--json"])
    texts = [json.loads(x)["payload"]["text"] for x in done.stdout.splitlines()
             if x.startswith("{") and '"job.line"' in x]
    assert texts == ["line 0", "line 1", "line 2"], done.stderr
    assert done.returncode == 1, done.stderr
    assert "event 1 is corrupt and was skipped (line 3): a line longer than 64 MiB" in done.stderr
    assert "Traceback" not in done.stderr and peak < 600 << 20, f"peak RSS {peak >> 20} MiB"
