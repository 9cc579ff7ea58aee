"""The extract stage's writer at Kimi-K2.5's width against a plain sequential write of the same
bytes to the same directory, in the same run.

    python benchmarks/extract_write.py [--dir DIR] [--gib 4] [--tokens 2048] [--rounds 2]
                                       [--format 0.9|0.3]

Why: at hidden 7168 with 4 captured layers in bf16 every token is 57,344 bytes of states
(docs/design.md §11), ~7x the widest row of benchmarks/extract_throughput.py; a real dataset is
terabytes, so a writer that reaches only part of what the disk takes costs days. This measures
the writer alone (no model): `pipeline.formats.write_sample`, the function every extraction
route of the stage writes a sample with (stack, cast, serialize, write to `.part`, rename), over
samples of `--tokens` tokens until `--gib` GiB of states, in the installed speculators' format
(0.9: hs_i.safetensors, [seq, 4, H]; 0.3: data_i.pt). The baseline: the same number of files
of the same sizes, written from one buffer with plain `write` calls, into the same directory.
Both are timed to the end of an `os.sync()`, so the page cache (this machine has more memory
than the states) does not flatter either; each round writes one then the other (alternating
which goes first) and deletes the files before the next.

Printed: per round both rates and their ratio; the best of each, MB/s; and the last line
`extract write / disk: R` (goal >= 0.8), R the median over rounds of each round's ratio (the
two passes of a round are adjacent in time, so a neighbour's burst on a shared disk moves both
less than it moves the best of either). Needs `--gib` GiB free under --dir (checked first;
nothing is left behind). No figure is asserted: the disk is shared with the neighbours.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HIDDEN = 7168  # Kimi-K2.5 (DeepSeek-V3 body)
LAYERS = 4  # 3 auxiliary + the last
CHUNK = 8 << 20  # the plain writer's write() size
LABELS = {"writer": "extract writer", "plain": "plain write   "}


def _writer_pass(out: Path, fmt: str, n: int, ids: Any, mask: Any,
                 states: list[Any]) -> tuple[float, list[int]]:
    from pipeline.formats import sample_name, write_sample

    t0 = time.perf_counter()
    for i in range(n):
        write_sample(fmt, out / sample_name(fmt, i), ids, mask, states)
    os.sync()
    took = time.perf_counter() - t0
    return took, [(out / sample_name(fmt, i)).stat().st_size for i in range(n)]


def _plain_pass(out: Path, sizes: list[int], buf: memoryview) -> float:
    t0 = time.perf_counter()
    for i, size in enumerate(sizes):
        with open(out / f"plain_{i}.bin", "wb") as fh:
            left = size
            while left:
                step = min(left, len(buf))
                fh.write(buf[:step])
                left -= step
    os.sync()
    return time.perf_counter() - t0


def _clear(out: Path) -> None:
    for p in out.iterdir():
        p.unlink()
    os.sync()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                    help="the disk to measure (a scratch folder is made and removed in it)")
    ap.add_argument("--gib", type=float, default=4.0, help="GiB of states per pass")
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per sample")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--format", choices=("0.9", "0.3"), default="0.9")
    args = ap.parse_args(argv)

    import torch

    per_token = LAYERS * HIDDEN * 2
    per_sample = per_token * args.tokens
    n = max(1, int(-(-args.gib * (1 << 30) // per_sample)))
    total = n * per_sample
    free = shutil.disk_usage(args.dir).free
    if free < 2.2 * total:
        print(f"error: {args.dir} has {free} bytes free; one pass and its baseline need "
              f"{total} each (--gib)", file=sys.stderr)
        return 2
    gen = torch.Generator().manual_seed(0)
    states = [torch.randn(args.tokens, HIDDEN, generator=gen).to(torch.bfloat16)
              for _ in range(LAYERS)]
    ids = torch.randint(0, 163840, (args.tokens,), generator=gen)
    mask = torch.ones(args.tokens, dtype=torch.long)
    buf = memoryview(states[0].reshape(-1).view(torch.uint8)[:CHUNK].numpy().tobytes())
    print(f"hidden {HIDDEN} x {LAYERS} layers x bf16 = {per_token} bytes/token of states; "
          f"{n} samples x {args.tokens} tokens = {total} bytes ({total / (1 << 30):.2f} GiB) "
          f"per pass, format {args.format}, under {args.dir}", flush=True)
    out = Path(tempfile.mkdtemp(prefix="eagle3-extract-write-", dir=args.dir))
    times: dict[str, list[float]] = {"writer": [], "plain": []}
    ratios: list[float] = []
    try:
        sizes: list[int] = []
        for r in range(args.rounds):
            for which in ("writer", "plain") if r % 2 == 0 else ("plain", "writer"):
                if which == "writer":  # round 1 starts with it: `sizes` are known for plain
                    took, sizes = _writer_pass(out, args.format, n, ids, mask, states)
                else:
                    took = _plain_pass(out, sizes, buf)
                times[which].append(took)
                print(f"round {r + 1}: {LABELS[which]} {sum(sizes) / took / 1e6:.0f} MB/s "
                      f"({sum(sizes)} bytes in {took:.2f} s)", flush=True)
                _clear(out)
            ratios.append(times["plain"][-1] / times["writer"][-1])
            print(f"round {r + 1}: extract write / disk {ratios[-1]:.2f}", flush=True)
        written = sum(sizes)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    best_w, best_p = min(times["writer"]), min(times["plain"])
    w, p = written / best_w, written / best_p
    print(f"best: extract writer {w / 1e6:.0f} MB/s, plain sequential write {p / 1e6:.0f} MB/s "
          f"({written} bytes per pass, {written / n / args.tokens:.0f} bytes/token on disk)")
    print(f"best / best: {w / p:.2f}; per round: {', '.join(f'{x:.2f}' for x in ratios)}")
    print(f"extract write / disk: {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
