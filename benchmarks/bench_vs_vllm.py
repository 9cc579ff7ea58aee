"""`console bench run` against `vllm bench serve` (vLLM's own client) on one real speculative
server, the same prompts and settings: each figure's console/vLLM ratio (issue #42).

    python benchmarks/bench_vs_vllm.py [--workdir DIR] [--pairs 6] [--requests 16]
        [--max-tokens 24] [--url URL]

Without --url: the demo pipeline in DIR (`console run --host local --demo`, skipped when a
run in the same workdir completed it), its target + trained head served by the box
environment's vLLM (`console serve start --demo`), stopped at the end. With --url: a server
already up, serving the demo target (its eval prompts under DIR's demo/out).

The method is the slow test's (tests/remote/bench/test_bench_vs_vllm.py; tests/vllm_peer.py,
`alternating`): the two clients run alternately, never at once (at once each slows the other:
per-pair TTFT ratios read 0.7-7x), `pairs` pairs with the order swapped every pair, each run
`requests` requests at concurrency 1 after one warm-up request; vLLM's client is kept loaded
between its runs (tests/vllm_bench_driver.py: the command's own code, imported once). Printed
per pair its ratios, then per figure the median over the pairs of those ratios (a pair's two
runs share the machine's moment; the machine drifts between pairs), with each client's median
over the pairs beside it; the last line is `console/vllm worst ratio: R`, the ratio furthest
from 1 (goal 0.85-1.15). The machine's load (`uptime`) is printed before and after: on shared
cores it moves the spread of the pairs. Nothing is asserted here (the test asserts TTFT and
TPOT p50).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import _common  # noqa: F401  (the repository on sys.path)

from console.cli import main as console_main
from tests import box_env
from tests.sshd_harness import free_port
from tests.vllm_peer import (
    PeerSettings,
    VllmPeer,
    alternating,
    figures,
    served_model,
    single_turn_prompts,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="box workdir (default: a temporary directory)")
    parser.add_argument("--url", help="a server already serving the demo (default: start one)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=24)
    args = parser.parse_args()
    python = box_env.ensure("vllm032")
    with tempfile.TemporaryDirectory(prefix="bench-vs-vllm-") as tmp:
        workdir = Path(args.workdir).expanduser() if args.workdir else Path(tmp) / "box"
        url = args.url or f"http://127.0.0.1:{free_port()}"
        toml = Path(tmp) / "console.toml"
        toml.write_text(f'[hosts.local]\nworkdir = "{workdir}"\nvllm_url = "{url}"\n')
        common = ["--host", "local", "--config", str(toml), "--no-record"]
        started = False
        try:
            if not args.url:
                if console_main(["run", "--demo", *common]) != 0:
                    return 1
                if console_main(["serve", "start", "--demo", "--python", str(python),
                                 *common]) != 0:
                    return 1
                started = True
            return measure(python, url, workdir, Path(tmp), args)
        finally:
            if started:
                console_main(["serve", "stop", *common])


def measure(python: Path, url: str, workdir: Path, tmp: Path, args: argparse.Namespace) -> int:
    s = PeerSettings(url=url, model=served_model(url), requests=args.requests,
                     max_tokens=args.max_tokens)
    prompts = single_turn_prompts(workdir / "demo" / "out" / "prepare" / "eval.jsonl",
                                  tmp / "prompts.jsonl")
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} (1, 5, 15 min)", flush=True)
    peer = VllmPeer(python)
    try:
        runs = alternating(peer, s, prompts, tmp, "pair", args.pairs)
    finally:
        peer.close()
    for i, (ours, theirs) in enumerate(zip(runs.console, runs.vllm, strict=True)):
        pair = figures(ours, theirs)
        print(f"pair {i} ({'vllm first' if i % 2 == 0 else 'console first'}): "
              + ", ".join(f"{name} {c / v:.2f}" for name, (c, v) in pair.items() if v),
              flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} (1, 5, 15 min)")
    print(f"{args.pairs} alternating pairs (one client at a time, order swapped each pair), "
          f"{s.requests} requests per run at concurrency 1, max_tokens {s.max_tokens}, 1 "
          "warm-up request; each ratio: the median over the pairs of each pair's console/vLLM ratio")
    worst = 1.0
    for name, (c, v) in runs.figures().items():
        ratio = runs.ratio(name)
        if abs(ratio - 1) > abs(worst - 1):
            worst = ratio
        print(f"{name}: console/vllm {ratio:.3f} (median of the pairs' ratios; medians: "
              f"console {c:.6g}, vllm {v:.6g})")
    print(f"console/vllm worst ratio: {worst:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
