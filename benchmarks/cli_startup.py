"""CLI start-up: `console --help` and `console CMD --help` against `python -c pass`.

Runs each command line several times in fresh interpreters (the same Python), prints the median
wall time, the ratio to `python -c pass` (goal: < 2.5x), and which heavy third-party modules
each one imported (a --help should import only what it needs to print itself).

    python benchmarks/cli_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("httpx", "prometheus_client", "zstandard", "textual", "asyncssh", "msgspec", "torch")
COMMANDS = ["", "run", "replay", "hosts", "jobs", "patch", "bench", "probe", "stats", "allreduce"]
PROBE = ("import sys, runpy; sys.argv = {argv!r}\n"
         "try:\n    runpy.run_module('console', run_name='__main__')\nexcept SystemExit:\n    pass\n"
         "print(','.join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")


def timed(code: str, runs: int) -> tuple[float, str]:
    times, imported = [], ""
    for _ in range(runs):
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True)
        times.append(time.perf_counter() - t)
        imported = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    return statistics.median(times), imported


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    base, _ = timed("pass", args.runs)
    print(f"python -c pass: {base * 1e3:7.0f} ms")
    for cmd in COMMANDS:
        argv = ["console", *([cmd] if cmd else []), "--help"]
        t, heavy = timed(PROBE.format(argv=argv, heavy=HEAVY), args.runs)
        print(f"{' '.join(argv):26s} {t * 1e3:7.0f} ms  {t / base:5.1f}x "
              f"{'ok' if t / base < 2.5 else 'over 2.5x'}  imports: {heavy or '-'}")


if __name__ == "__main__":
    main()
