"""`make bench`: every benchmark in benchmarks/, one after another, each printing its figures
beside the baseline it measured in the same run; then a table of what ran, how long it took,
its exit status and its last line (the headline figure of most).

Sizes are each benchmark's own defaults unless `--quick` (smaller sizes, minutes in all rather
than an hour); the benchmarks that start a vLLM engine (served_acceptance,
allreduce_decode_share, extract_throughput, regenerate_speed,
regenerate_gain) take minutes either way. The helpers the benchmarks share (_common,
real_session, session_day) are not benchmarks and are not run alone.

    python benchmarks/run_all.py [--quick] [--only NAME ...] [--skip NAME ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from _common import ROOT

HELPERS = {"_common", "real_session", "session_day", "run_all"}
# Smaller runs of the slowest ones: same figures, fewer events or rounds.
QUICK: dict[str, list[str]] = {
    "replay_print": ["--events", "200000", "--rounds", "1"],
    "replay_real": ["--records", "500000", "--rounds", "1"],
    "replay_fold": ["--events", "300000"],
    "replay_seek": ["--events", "300000"],
    "session_io": ["--events", "200000"],
    "session_scale": ["--events", "1000000"],  # under ~1M compressed events no index is kept
    "ssh_stream": ["--lines", "200000"],
    "stats_stream": ["--seconds", "15"],
    "fleet_stats": ["--seconds", "8"],
    "tui_day_load": ["--seconds", "10", "--switches", "12"],
    "tui_first_paint": ["--runs", "3"],
    "tui_key_latency": ["--presses", "10"],
    "tui_switch_profile": ["--switches", "8"],
    "tui_table_paint": ["--repeat", "50"],
    "served_acceptance": ["--concurrency", "1", "--rounds", "1"],
    "regenerate_speed": ["--samples", "96", "--rounds", "1"],
    "regenerate_gain": ["--epochs", "4"],
    "allreduce_decode_share": ["--captures", "1"],
    "extract_throughput": ["--rounds", "1"],
    "cli_startup": ["--runs", "5"],
}


def benchmarks() -> list[str]:
    here = ROOT / "benchmarks"
    return sorted(p.stem for p in here.glob("*.py") if p.stem not in HELPERS)


def run_one(name: str, quick: bool) -> tuple[int, float, str]:
    cmd = [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"),
           *(QUICK.get(name, []) if quick else [])]
    print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    last = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if line.strip():
            last = line.strip()
    rc = proc.wait()
    return rc, time.perf_counter() - t, last


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (see QUICK)")
    ap.add_argument("--only", nargs="+", default=[], help="these benchmarks only")
    ap.add_argument("--skip", nargs="+", default=[], help="all but these")
    args = ap.parse_args()
    names = benchmarks()
    unknown = [n for n in [*args.only, *args.skip] if n not in names]
    if unknown:
        print(f"run_all: no benchmark named {', '.join(unknown)} (have: {', '.join(names)})",
              file=sys.stderr)
        return 2
    chosen = [n for n in names if (not args.only or n in args.only) and n not in args.skip]
    print(f"{len(chosen)} benchmarks; machine load average {os.getloadavg()[0]:.2f} "
          "(figures on a shared machine move with its neighbours: each is read against the "
          "baseline printed beside it)")
    results = [(name, *run_one(name, args.quick)) for name in chosen]
    print("\n=== summary")
    for name, rc, took, last in results:
        print(f"{name:<24} {'ok  ' if rc == 0 else f'rc {rc}'} {took:7.1f} s   {last[:110]}")
    return 0 if all(rc == 0 for _, rc, _, _ in results) else 3


if __name__ == "__main__":
    raise SystemExit(main())
