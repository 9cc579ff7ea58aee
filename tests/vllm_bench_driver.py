"""vLLM's own benchmark client (`vllm bench serve`), kept loaded between runs: run with the box
environment's python, it reads one JSON list of `vllm bench serve` arguments per stdin line,
runs vLLM's benchmark on them and prints `@@peer done` (or `@@peer failed MESSAGE`).

Why not the `vllm` command each time: importing vLLM takes 45 s on this machine's loaded
shared cores (measured: `vllm bench serve --help`), so alternating pairs of runs
(tests/vllm_peer.py) would spend minutes importing. The code that runs is the command's own:
`vllm bench serve` parses its arguments with vllm.benchmarks.serve.add_cli_args and calls
vllm.benchmarks.serve.main (vllm/entrypoints/cli/benchmark/serve.py, vLLM 0.32); so does this.
Only the standard library and vLLM are imported (it runs in the box environment).
"""

from __future__ import annotations

import json
import sys
import traceback

MARK = "@@peer"


def main() -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    print(f"{MARK} ready", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        parser = FlexibleArgumentParser(prog="vllm bench serve")
        add_cli_args(parser)
        try:
            bench_main(parser.parse_args(json.loads(line)))
        except BaseException as exc:  # said on the pipe: the caller raises
            traceback.print_exc(file=sys.stdout)
            print(f"{MARK} failed {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
            continue
        print(f"{MARK} done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
