"""The extract stage's writer at Kimi-K2.5's width against a plain sequential write of the same
bytes, on a disk and on a RAM-backed tmpfs, in the same run.

    python benchmarks/extract_write.py [--dir DIR ...] [--gib 4] [--tokens 2048] [--rounds 3]
                                       [--format both|0.9|0.3] [--threads N]

Why: at hidden 7168 with 4 captured layers in bf16 every token is 57,344 bytes of states
(docs/design.md §11); a real dataset is terabytes, so a writer that reaches only part of what
the disk takes costs days (issues #39, #54). This measures the writer alone (no model): the
extract stage's writer pool (`pipeline.write_pool`, `--threads`, by default the stage's) running
`pipeline.formats.write_sample`, the function every extraction route writes a sample with, over
samples of `--tokens` tokens until `--gib` GiB of states, in `--format` (0.9: hs_i.safetensors,
[seq, 4, H]; 0.3: data_i.pt, torch.save's file; by default both, one after the other), no more
samples in flight than the pool's threads (as the stage hands them over).

The baseline, "a plain sequential write of the same bytes": the same number of files, each
written from the bytes of one real sample file held in memory once (written by write_sample
first, read back), in 8 MiB `write` calls on one thread. Until issue #54 the baseline wrote
every file from one 8 MiB buffer, which stays in the CPU cache while the writer reads 117 MB of
fresh sample memory per file: it measured the cache, not the write of those bytes. That old
baseline's pass still runs and its ratio is printed (`old baseline`) so the two can be compared.

Timing: each pass ends with `fdatasync` of every file it wrote (only this pass's data: `os.sync`
flushed every filesystem of a shared machine, the neighbours' writes included); tmpfs has
nothing to flush. The passes of a round run in a rotating order, files deleted after each.
Printed per row (directory): each pass's MB/s and CPU seconds; the disk's own rate (the plain
pass: a dd-like write with fdatasync, median over rounds); where that is under 1.5 GB/s, that
the row's ratio measures the disk rather than the writer; the row's ratio, the median over
rounds of plain time / writer time (the passes of a round are adjacent in time, so a
neighbour's burst moves both). The tmpfs row (/dev/shm, added unless --dir is given) is the
writer's ceiling on any machine: there the writer's own copying is all there is.

Last line: `extract write / disk: R` (goal >= 0.9), the lowest row ratio among the rows that
measure the writer (tmpfs, or a disk of >= 1.5 GB/s; every row if none does), over every format
measured: with the default `--format both`, the worse of 0.9 and 0.3. Needs `--gib`
GiB free in each directory (checked first; nothing is left behind). No figure is asserted: the
machine is shared with the neighbours.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HIDDEN = 7168  # Kimi-K2.5 (DeepSeek-V3 body)
LAYERS = 4  # 3 auxiliary + the last
CHUNK = 8 << 20  # the plain writer's write() size
FAST_DISK = 1.5e9  # B/s: below it the disk, not the writer, sets the pace (issue #54)
PASSES = ("writer", "plain", "old")
LABELS = {"writer": "extract writer          ", "plain": "plain write (disk)      ",
          "old": "old baseline (8 MiB buf)"}


def _fdatasync(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _writer_pass(out: Path, fmt: str, n: int, threads: int, ids: Any, mask: Any,
                 states: list[Any]) -> list[Path]:
    from pipeline.formats import sample_name, write_sample
    from pipeline.write_pool import WritePool

    paths = [out / sample_name(fmt, i) for i in range(n)]
    with WritePool(threads) as pool:
        for p in paths:
            pool.wait(threads - 1)  # as the stage hands samples over: `threads` in flight
            pool.submit(p, len(ids), partial(write_sample, fmt, p, ids, mask, states))
    return paths


def _plain_pass(out: Path, n: int, size: int, buf: memoryview) -> list[Path]:
    """`n` files of `size` bytes from `buf`: the whole file's bytes (len(buf) == size) or one
    8 MiB buffer written again and again (the old baseline)."""
    paths = [out / f"plain_{i}.bin" for i in range(n)]
    for p in paths:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            left = size
            while left:
                off = (size - left) % len(buf)
                left -= os.write(fd, buf[off:off + min(left, CHUNK, len(buf) - off)])
        finally:
            os.close(fd)
    return paths


def is_tmpfs(path: Path) -> bool:
    """Whether `path` lies on a tmpfs (the longest mount point above it in /proc/mounts)."""
    best, kind = "", ""
    real = str(path.resolve())
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1]
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, parts[2]
    return kind == "tmpfs"


def _row(where: Path, fmt: str, args: argparse.Namespace, n: int, ids: Any, mask: Any,
         states: list[Any]) -> tuple[float, float, bool]:
    """One directory's rounds; (median ratio, disk B/s, whether the row measures the writer)."""
    from pipeline.formats import sample_name, write_sample

    tmpfs = is_tmpfs(where)
    out = Path(tempfile.mkdtemp(prefix="eagle3-extract-write-", dir=where))
    times: dict[str, list[float]] = {k: [] for k in PASSES}
    cpu: dict[str, list[float]] = {k: [] for k in PASSES}
    ratios: list[float] = []
    old: list[float] = []
    try:
        one = out / sample_name(fmt, 0)
        write_sample(fmt, one, ids, mask, states)
        whole = memoryview(one.read_bytes())  # the file's bytes, in memory once
        one.unlink()
        size = len(whole)
        hot = whole[:CHUNK]
        written = n * size
        print(f"\n{where}{' (tmpfs)' if tmpfs else ''}, format {fmt}: {n} files x {size} bytes "
              f"= {written} bytes per pass, {args.threads} writer thread(s)", flush=True)
        # a process's first pass into a directory pays for its first page allocations (seen
        # 1.5-2x the CPU of later passes, whichever pass it was): one small untimed pass each
        warm = min(n, 2)
        for which in PASSES:
            paths = (_writer_pass(out, fmt, warm, args.threads, ids, mask, states)
                     if which == "writer" else
                     _plain_pass(out, warm, size, whole if which == "plain" else hot))
            for p in paths:
                p.unlink()
        for r in range(args.rounds):
            k = (r + 2) % 3  # round 1 starts with the old baseline: a process's first timed
            order = PASSES[k:] + PASSES[:k]  # pass paid more CPU, whichever it was
            for which in order:
                c0, t0 = _cpu(), time.perf_counter()
                if which == "writer":
                    paths = _writer_pass(out, fmt, n, args.threads, ids, mask, states)
                else:
                    paths = _plain_pass(out, n, size, whole if which == "plain" else hot)
                _fdatasync(paths)
                took, used = time.perf_counter() - t0, _cpu() - c0
                times[which].append(took)
                cpu[which].append(used)
                for p in paths:
                    p.unlink()
            ratios.append(times["plain"][-1] / times["writer"][-1])
            old.append(times["old"][-1] / times["writer"][-1])
            print(f"round {r + 1}: " + ", ".join(
                f"{k} {written / times[k][-1] / 1e6:.0f} MB/s ({cpu[k][-1]:.2f} s CPU)"
                for k in PASSES) + f"; writer / plain {ratios[-1]:.2f}, writer / old "
                f"{old[-1]:.2f}; load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    disk = written / statistics.median(times["plain"])
    for k in PASSES:
        rates = sorted(written / t / 1e6 for t in times[k])
        print(f"{LABELS[k]}: median {statistics.median(rates):.0f} MB/s (spread "
              f"{rates[0]:.0f}-{rates[-1]:.0f}), CPU {written / statistics.median(cpu[k]) / 1e9:.2f}"
              f" GB per CPU second")
    fast = disk >= FAST_DISK
    print(f"disk's own rate (plain write of the same bytes, fdatasync): {disk / 1e6:.0f} MB/s"
          + ("" if fast or tmpfs else f": under {FAST_DISK / 1e9:.1f} GB/s, so this row's ratio "
             "measures the disk, not the writer (the tmpfs row gives the writer's ceiling)"))
    if tmpfs and not fast:
        print(f"(a plain write into RAM at under {FAST_DISK / 1e9:.1f} GB/s: this process got "
              "little CPU (load average above); the ratio compares the two under that load, "
              "and the CPU seconds say what each pass cost)")
    ratio = statistics.median(ratios)
    cpu_ratio = statistics.median(p / w for p, w in zip(cpu["plain"], cpu["writer"], strict=True))
    print(f"{where}, format {fmt}: extract write / disk {ratio:.2f} (per round "
          f"{', '.join(f'{x:.2f}' for x in ratios)}); against the old baseline "
          f"{statistics.median(old):.2f}; CPU seconds, plain / writer: {cpu_ratio:.2f} (what the "
          "writer costs beside the plain write, less moved by the neighbours' load)", flush=True)
    return ratio, disk, fast or tmpfs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, action="append",
                    help="a directory to measure (a scratch folder is made and removed in it); "
                         "repeatable. Default: the temporary directory, then /dev/shm")
    ap.add_argument("--gib", type=float, default=4.0, help="GiB of states per pass")
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per sample")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--format", choices=("both", "0.9", "0.3"), default="both")
    ap.add_argument("--threads", type=int, default=0,
                    help="writer threads (default: the stage's, pipeline.write_pool)")
    args = ap.parse_args(argv)

    import torch

    from pipeline.torch_zip import fast_crc32
    from pipeline.write_pool import default_threads

    args.threads = default_threads() if args.threads == 0 else args.threads
    formats = ["0.9", "0.3"] if args.format == "both" else [args.format]
    dirs = args.dir or [Path(tempfile.gettempdir())] + (
        [Path("/dev/shm")] if Path("/dev/shm").is_dir() else [])
    per_token = LAYERS * HIDDEN * 2
    per_sample = per_token * args.tokens
    n = max(1, int(-(-args.gib * (1 << 30) // per_sample)))
    total = n * per_sample
    if args.rounds < 1 or args.gib <= 0 or args.tokens < 1 or args.threads < 1:
        print("error: --rounds, --gib, --tokens and --threads must be positive", file=sys.stderr)
        return 2
    for d in dirs:
        if not d.is_dir():
            print(f"error: --dir {d} is not a directory", file=sys.stderr)
            return 2
        free = shutil.disk_usage(d).free
        if free < 1.1 * total:
            print(f"error: {d} has {free} bytes free; a pass needs {total} (--gib)",
                  file=sys.stderr)
            return 2
    gen = torch.Generator().manual_seed(0)
    states = [torch.randn(args.tokens, HIDDEN, generator=gen).to(torch.bfloat16)
              for _ in range(LAYERS)]
    ids = torch.randint(0, 163840, (args.tokens,), generator=gen)
    mask = torch.ones(args.tokens, dtype=torch.long)
    print(f"hidden {HIDDEN} x {LAYERS} layers x bf16 = {per_token} bytes/token of states; "
          f"{n} samples x {args.tokens} tokens = {total} bytes ({total / (1 << 30):.2f} GiB) "
          f"of states per pass, formats {' and '.join(formats)} (0.3's CRC32: "
          f"{fast_crc32()[0]}), {os.cpu_count()} CPUs, load "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    rows = [(f, d, *_row(d, f, args, n, ids, mask, states)) for f in formats for d in dirs]
    counted = [r for r in rows if r[4]] or rows
    print()
    for f, d, ratio, disk, measures in rows:
        print(f"{f} {d!s:<20} disk {disk / 1e6:6.0f} MB/s  extract write / disk {ratio:.2f}"
              + ("" if measures else "  (disk under 1.5 GB/s: not the writer's figure)"))
    print(f"extract write / disk: {min(r[2] for r in counted):.2f}"
          + (" (the worse format)" if len(formats) > 1 else f" (format {formats[0]})"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
