"""`console bench run` against `vllm bench serve` (vLLM's own client) on one real speculative
server, the same prompts and settings: each figure's console/vLLM ratio (issue #42).

    python benchmarks/bench_vs_vllm.py [--workdir DIR] [--pairs 6] [--requests 8]
        [--max-tokens 24] [--url URL]

Without --url: the demo pipeline in DIR (`console run --host local --demo`, skipped when a
run in the same workdir completed it), its target + trained head served by the box
environment's vLLM (`console serve start --demo`), stopped at the end. With --url: a server
already up, serving the demo target (its eval prompts under DIR's demo/out).

Acceptance comes from one run of each client alone (each window then holds only its own
drafts). The timings come from `pairs` runs of both clients at once (tests/vllm_peer.py,
side_by_side): run one after the other, two clients compare two moments of a shared machine
whose server speed moves by 2x within seconds (measured: per-pair TTFT ratios 0.68-5.76 over
four sequential pairs). Each client sends `requests` requests at concurrency 1 after one
warm-up request. Printed per figure: the median over the pairs of the console's value and of
vLLM's, and their ratio; the last line is `console/vllm worst ratio: R`, the ratio furthest from
1 (goal 0.85-1.15). Nothing is asserted here (tests/remote/bench/test_bench_vs_vllm.py
asserts).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import _common  # noqa: F401  (the repository on sys.path)

from console.cli import main as console_main
from tests import box_env
from tests.sshd_harness import free_port
from tests.vllm_peer import (
    FIGURES,
    PeerSettings,
    console_bench,
    figures,
    served_model,
    side_by_side,
    single_turn_prompts,
    vllm_bench,
)

TIMINGS = {name for name, *_ in FIGURES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="box workdir (default: a temporary directory)")
    parser.add_argument("--url", help="a server already serving the demo (default: start one)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--requests", type=int, default=8)
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
    # Acceptance: each client alone, so each window holds only its own drafts.
    alone = figures(console_bench(s, prompts, tmp, "console-alone"),
                    vllm_bench(python, s, prompts, tmp, "vllm-alone"))
    # Timings: both clients at once (tests/vllm_peer.py, side_by_side), `pairs` times.
    ours: dict[str, list[float]] = {}
    theirs: dict[str, list[float]] = {}
    for i in range(args.pairs):
        pair = figures(*side_by_side(python, s, prompts, tmp, f"pair-{i}"))
        for name, (c, v) in pair.items():
            if name in TIMINGS:
                ours.setdefault(name, []).append(c)
                theirs.setdefault(name, []).append(v)
        print(f"pair {i}: " + ", ".join(f"{name} {c / v:.2f}" for name, (c, v) in pair.items()
                                        if name in TIMINGS and v), flush=True)
    print(f"{args.pairs} pairs run side by side, {s.requests} requests per client at "
          f"concurrency 1 each, max_tokens {s.max_tokens}, 1 warm-up request; medians over "
          "the pairs; acceptance from one run of each client alone")
    rows = [(name, statistics.median(ours[name]), statistics.median(theirs[name]))
            for name in ours]
    rows += [(name, c, v) for name, (c, v) in alone.items() if name not in TIMINGS]
    worst = 1.0
    for name, c, v in rows:
        ratio = c / v if v else float("inf")
        if abs(ratio - 1) > abs(worst - 1):
            worst = ratio
        print(f"{name}: console {c:.6g} / vllm {v:.6g} = {ratio:.3f}")
    print(f"console/vllm worst ratio: {worst:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
