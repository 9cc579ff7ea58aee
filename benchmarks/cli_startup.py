"""CLI start-up: `console --help` and `console CMD --help` against `python -c pass`.

Runs each command line several times in fresh interpreters (the same Python), prints the median
wall time, the ratio to `python -c pass` (goal: < 2.5x), and which heavy third-party modules
each one imported (a --help should import only what it needs to print itself).

Three columns, each against its own `python -c pass` of the same run:
- cached: bytecode cached (as an installed console runs: pip compiles at install time, an
  editable checkout writes __pycache__ on first use). The cache lives in a temporary
  PYTHONPYCACHEPREFIX, warmed by one untimed run of each line, so the tree is not written to.
- cached, CPU: the same runs' CPU time (user + system): on a shared, loaded machine the wall
  time measures the load, this does not.
- no cache: PYTHONDONTWRITEBYTECODE=1 with no prefix: our sources are compiled on every run (a
  sandbox or CI that sets the variable sees this; the stdlib keeps its own cached bytecode).

Then issue 52's own figure: `console --help` (the installed entry script, this tree first on
the path) against `python -c pass`, the median of --pairs alternating pairs (goal: <= 2x).

    python benchmarks/cli_startup.py [--runs N] [--pairs N]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from _common import ROOT, children_cpu, int_options

from console.cli import COMMANDS, command_name

HEAVY = ("httpx", "prometheus_client", "zstandard", "textual", "asyncssh", "msgspec", "torch")
PROBE = ("import sys, runpy; sys.argv = {argv!r}\n"
         "try:\n    runpy.run_module('console', run_name='__main__')\nexcept SystemExit:\n    pass\n"
         "print(','.join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
GOAL = 2.5


def timed(code: str, runs: int, env: dict[str, str]) -> tuple[float, float, str]:
    """Median wall time, median CPU time (the child's user + system) and what it imported.
    The CPU time holds still on a loaded machine, where the wall time measures the load."""
    times, cpus, imported = [], [], ""
    for _ in range(runs):
        cpu, t = children_cpu(), time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, env=env)
        times.append(time.perf_counter() - t)
        cpus.append(children_cpu() - cpu)
        imported = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    return statistics.median(times), statistics.median(cpus), imported


def pairs(n: int, env: dict[str, str]) -> None:
    """`console --help` and `python -c pass` in turn, n times: the medians (wall and CPU) and
    their ratio. Alternating pairs, so a change of the machine's load falls on both alike."""
    console = [os.path.join(os.path.dirname(sys.executable), "console"), "--help"]
    env = {**env, "PYTHONPATH": str(ROOT)}
    got: dict[str, list[tuple[float, float]]] = {"help": [], "pass": []}
    for i in range(n + 1):  # the first pair warms the caches, untimed
        for key, argv in (("pass", [sys.executable, "-c", "pass"]), ("help", console)):
            cpu, t = children_cpu(), time.perf_counter()
            subprocess.run(argv, cwd=ROOT, capture_output=True, env=env)
            if i:
                got[key].append((time.perf_counter() - t, children_cpu() - cpu))
    wall = {k: statistics.median(w for w, _ in v) for k, v in got.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in got.items()}
    print(f"console --help vs python -c pass, median of {n} alternating pairs: wall "
          f"{wall['help'] * 1e3:.0f} / {wall['pass'] * 1e3:.0f} ms = {wall['help'] / wall['pass']:.2f}x,"
          f" CPU {cpu['help'] * 1e3:.0f} / {cpu['pass'] * 1e3:.0f} ms = "
          f"{cpu['help'] / cpu['pass']:.2f}x (goal <= 2x; load {os.getloadavg()[0]:.1f})")


def main() -> None:
    args = int_options(runs=5, pairs=10)
    with tempfile.TemporaryDirectory(prefix="cli-startup-pyc-") as prefix:
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = prefix
        uncached = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
        uncached["PYTHONDONTWRITEBYTECODE"] = "1"
        lines = [("python -c pass", "pass")]
        for cmd in ["", *map(command_name, COMMANDS)]:
            argv = ["console", *([cmd] if cmd else []), "--help"]
            lines.append((" ".join(argv), PROBE.format(argv=argv, heavy=HEAVY)))
        for _, code in lines:  # warm the bytecode cache (and the disk cache) untimed
            timed(code, 1, cached)
        base_c, cpu_c, _ = timed("pass", args.runs, cached)
        base_u, _, _ = timed("pass", args.runs, uncached)
        print(f"{'':26s} {'cached':>17s}   {'cached, CPU':>17s}   {'no cache':>17s}")
        print(f"{'python -c pass':26s} {base_c * 1e3:7.0f} ms  1.0x   {cpu_c * 1e3:7.0f} ms  1.0x"
              f"   {base_u * 1e3:7.0f} ms  1.0x")
        worst = worst_cpu = 0.0
        for label, code in lines[1:]:
            t_c, c_c, heavy = timed(code, args.runs, cached)
            t_u, _, _ = timed(code, args.runs, uncached)
            worst, worst_cpu = max(worst, t_c / base_c), max(worst_cpu, c_c / cpu_c)
            print(f"{label:26s} {t_c * 1e3:7.0f} ms {t_c / base_c:4.1f}x   "
                  f"{c_c * 1e3:7.0f} ms {c_c / cpu_c:4.1f}x   "
                  f"{t_u * 1e3:7.0f} ms {t_u / base_u:4.1f}x   imports: {heavy or '-'}")
        print(f"worst (cached): {worst:.1f}x python -c pass "
              f"({'under' if worst < GOAL else 'over'} the {GOAL}x goal); "
              f"in CPU time {worst_cpu:.1f}x (what a loaded machine does not change)")
        pairs(args.pairs, cached)


if __name__ == "__main__":
    main()
