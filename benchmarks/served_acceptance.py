"""Served vs offline acceptance, engine start time, and the speculation-vs-baseline sweep, from a
real vLLM (the box environment, scripts/box_env.py) on this machine.

    python benchmarks/served_acceptance.py [--workdir DIR] [--concurrency 1,4] [--rounds 2]

Runs `console run --host local --demo --serve` (the pipeline is skipped when a previous run in
the same workdir completed it) and prints, each against its baseline measured in this run:
- engine start: the speculative engine's seconds to first answer / the baseline engine's;
- acceptance: the served mean acceptance length (vLLM's counters over the whole sweep) / the
  pipeline's offline estimate (evaluate/acceptance.json), per position alike;
- speedup: tokens/s with the head / tokens/s of the baseline server, per concurrency.
No figure is asserted: on 2 shared cores the numbers move with the neighbours' load.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import _common  # noqa: F401  (the repository on sys.path)

from console.cli import main as console_main
from console.sessions.reader import SessionReader
from remote.spine import events as ev
from tests import box_env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="box workdir (default: a temporary directory)")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--rounds", default="2")
    args = parser.parse_args()
    python = box_env.ensure("vllm032")
    with tempfile.TemporaryDirectory(prefix="served-bench-") as tmp:
        workdir = Path(args.workdir).expanduser() if args.workdir else Path(tmp) / "box"
        toml = Path(tmp) / "console.toml"
        toml.write_text(f'[hosts.local]\nworkdir = "{workdir}"\n')
        session = Path(tmp) / "session.jsonl"
        rc = console_main(["run", "--host", "local", "--demo", "--serve", "--serve-python",
                           str(python), "--concurrency", args.concurrency, "--rounds",
                           args.rounds, "--config", str(toml), "--session", str(session),
                           "--json"])
        with SessionReader(session) as reader:
            events = list(reader.events())
    if rc != 0:
        for e in events:
            if e.kind == ev.CONSOLE_ERROR:
                print(e.payload.get("message"), file=sys.stderr)
        return rc
    summary = next(e.payload for e in events if e.kind == ev.BENCH_SUMMARY)
    starts = summary["start_seconds"]
    print(f"engine start: speculative {starts['speculative']:.1f} s, baseline "
          f"{starts['baseline']:.1f} s (ratio {starts['speculative'] / starts['baseline']:.2f})")
    offline, served = summary["offline"], summary["served"]
    print(f"mean acceptance length: served {served['mean_length']:.3f} / offline "
          f"{offline['mean_length']:.3f} = {served['mean_length'] / offline['mean_length']:.3f}"
          f" ({served['drafts']:.0f} drafts served)")
    for i, (s, o) in enumerate(zip(served["per_position"], offline["per_position"],
                                   strict=False)):
        ratio = f"{s / o:.2f}" if o else "n/a"
        print(f"  position {i}: served {s:.3f} / offline {o:.3f} = {ratio}")
    for row in summary["rows"]:
        print(f"c={row['concurrency']}: {row['spec_tok_s']:.1f} tok/s with the head / "
              f"{row['baseline_tok_s']:.1f} tok/s baseline = x{row['speedup']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
