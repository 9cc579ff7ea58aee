"""`console bench run` against `vllm bench serve` (vLLM's own client) on one real speculative
server, the same prompts and settings: each figure's console/vLLM ratio (issue #42).

    python benchmarks/bench_vs_vllm.py [--workdir DIR] [--pairs 500] [--max-tokens 24] [--url URL]

Without --url: the demo pipeline in DIR (`console run --host local --demo`, skipped when a
run in the same workdir completed it), its target + trained head served by the box
environment's vLLM (`console serve start --demo`), stopped at the end. With --url: a server
already up, serving the demo target (its eval prompts under DIR's demo/out).

The method is the slow test's (tests/remote/bench/test_bench_vs_vllm.py; tests/vllm_peer.py,
`compare` and `report`): the two clients interleaved request by request, never at once (at
once each slows the other: per-pair TTFT ratios read 0.7-7x): request i by one client, at
once request i by the other, the order swapped every i, `pairs` such pairs at concurrency 1
after each client's warm-up. Each client is kept loaded in a process of its own and runs its
own code per request: vLLM's `vllm bench serve` request function and counter scrape
(tests/vllm_bench_driver.py), the console's `console bench run` driver
(tests/console_bench_driver.py). Request i carries the same prompt and decodes the same
tokens on both sides, so TTFT, TPOT and E2E p50 are the median over the pairs of console_i /
vLLM_i, leaving out the pairs either client saw arrive in one burst (a stall:
tests/vllm_peer.py, Timed.streamed; their count is printed); the p99s are each client's over
the same requests; acceptance is summed over each client's own windows. Printed: what one
whole `vllm bench serve --num-prompts 1` costs beyond its request, then per figure its ratio
with each client's median beside it; the last line is `console/vllm worst ratio: R`, the
ratio furthest from 1 (goal 0.85-1.15). The machine's load (`uptime`) is printed before and
after: on shared cores it sets the spread. Nothing is asserted here. 500 pairs by default
(~4 min): a p99 over the slow test's 96 requests is the one worst stall of either client
(TTFT p99 ratio 0.68 and 1.85 in two such runs), over 500 it is the fifth worst.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import load_average  # first: the repository on sys.path

from console.cli import main as console_main
from pipeline.stages import PREPARE
from tests import box_env
from tests.sshd_harness import free_port
from tests.vllm_peer import PeerSettings, compare, report, served_model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="box workdir (default: a temporary directory)")
    parser.add_argument("--url", help="a server already serving the demo (default: start one)")
    parser.add_argument("--pairs", type=int, default=500)  # p99 over 96 is one stall
    parser.add_argument("--max-tokens", type=int, default=24)
    args = parser.parse_args()
    python = box_env.ensure("vllm032")
    with tempfile.TemporaryDirectory(prefix="bench-vs-vllm-") as tmp:
        workdir = Path(args.workdir).expanduser() if args.workdir else Path(tmp) / "box"
        url = args.url or f"http://127.0.0.1:{free_port()}"
        toml = Path(tmp) / "console.toml"
        toml.write_text(f'[hosts.local]\nworkdir = "{workdir}"\nvllm_url = "{url}"\n')
        common = ["--host", "local", "--config", str(toml), "--no-record"]
        started, worst = False, float("nan")
        try:
            if not args.url:
                if console_main(["run", "--demo", *common]) != 0:
                    return 1
                if console_main(["serve", "start", "--demo", "--python", str(python),
                                 *common]) != 0:
                    return 1
                started = True
            worst = measure(python, url, workdir, Path(tmp), args)
        finally:
            if started:
                console_main(["serve", "stop", *common])
    # After the server's stop lines, so that the ratio is the last line printed.
    print(f"console/vllm worst ratio: {worst:.3f}")
    return 0


def measure(python: Path, url: str, workdir: Path, tmp: Path, args: argparse.Namespace) -> float:
    s = PeerSettings(url=url, model=served_model(url), max_tokens=args.max_tokens)
    print(f"load before: {load_average()} (1, 5, 15 min)", flush=True)
    runs = compare(python, s, workdir / "demo" / "out" / PREPARE / "eval.jsonl", tmp,
                   args.pairs)
    lines, worst = report(runs)
    print(f"load after: {load_average()} (1, 5, 15 min)")
    print(f"max_tokens {s.max_tokens}, {s.warmups} warm-up request per client")
    print("\n".join(lines))
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
