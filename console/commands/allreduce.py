"""`console allreduce sweep|trace|capture`: what all-reduce costs on a box.

sweep: bus bandwidth over message sizes on N ranks (torch.distributed on the box).
trace: share of device time in all-reduce kernels, from torch-profiler traces.
capture: drive vLLM's profiler on the box, fetch the traces, analyse them.
Each prints a table and emits an `allreduce.result` event (recorded with the session).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from console.argtypes import add_out_options, nonneg_int, positive_float, positive_int
from console.context import Context, add_common_options, add_host_options, add_verbs
from remote.errors import EXIT_OK, UsageError

# The sweep and the trace analysis (asyncio, the SSH transport, msgspec events) are imported in
# the function that runs them: `console allreduce --help` loads none of it.


HELP = "all-reduce bandwidth sweep and trace analysis"


def register(p: argparse.ArgumentParser) -> None:
    verbs = add_verbs(p, dest="verb", metavar="VERB",
                      description="Measure what all-reduce costs: a bus-bandwidth sweep, or its "
                                  "share of device time in torch-profiler traces.")

    s = verbs.add_parser("sweep", help="bus bandwidth over message sizes on N ranks",
                         description="all-reduce time, algbw and busbw = algbw*2(n-1)/n over "
                         "message sizes (nccl-tests' definitions), NCCL on GPUs, gloo on CPU.")
    add_host_options(s)
    s.add_argument("--ranks", type=positive_int, required=True, help="number of ranks (GPUs with NCCL)")
    s.add_argument("--sizes", default="4K..256M",
                   help="message sizes: 4K..256M (doubling), or a list 4K,1M (default 4K..256M)")
    s.add_argument("--iters", type=positive_int, default=20, help="timed all-reduces per size")
    s.add_argument("--warmup", type=nonneg_int, default=5, help="untimed all-reduces per size")
    s.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    s.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    s.add_argument("--timeout", type=positive_float, default=600.0, help="seconds for the whole sweep")
    add_common_options(s, func=run_sweep_cmd)

    t = verbs.add_parser("trace", help="all-reduce share of device time in profiler traces",
                         description="Analyse torch-profiler Chrome traces (.json or .json.gz, "
                         "one per rank, as vLLM's profiler writes them).")
    t.add_argument("files", nargs="+", metavar="FILE", type=Path)
    _kernel_options(t)
    add_common_options(t, func=run_trace_cmd)

    c = verbs.add_parser("capture", help="profile vLLM on the box, then analyse the traces",
                         description="POST /start_profile, wait, POST /stop_profile on the "
                         "host's vLLM (through the SSH connection), fetch the new trace files "
                         "and analyse them: all-reduce share of the decode steps (vLLM's per-step "
                         "annotations), the ops/kernels counted. vLLM must run with "
                         "VLLM_TORCH_PROFILER_DIR (<= 0.15) or --profiler-config (>= 0.13) "
                         "pointing at --profiler-dir.")
    add_host_options(c)
    c.add_argument("--profiler-dir", required=True,
                   help="the directory vLLM writes traces to, on the box")
    c.add_argument("--seconds", type=positive_float, default=5.0,
                   help="how long to profile (drive load meanwhile, e.g. `console bench`)")
    c.add_argument("--url", default=None, help="vLLM URL on the box (default: the host's)")
    c.add_argument("--requests", type=nonneg_int, default=0,
                   help="send this many greedy completions during the window, so it holds "
                   "decode steps (default 0: profile whatever load is running)")
    c.add_argument("--max-tokens", type=positive_int, default=32,
                   help="tokens per --requests completion (default 32)")
    add_out_options(c, "local directory for the fetched traces (default ./traces)",
                    "replace a trace file of the same name already in --out", "DIR",
                    type=Path, default=Path("traces"))
    _kernel_options(c)
    add_common_options(c, func=run_capture_cmd)


def _kernel_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernels", nargs="+", default=[], metavar="PATTERN",
                   help="more all-reduce kernel names (fnmatch patterns, e.g. '*my_allreduce*')")
    p.add_argument("--only-kernels", action="store_true",
                   help="use only --kernels, not the built-in list")


def _patterns(args: argparse.Namespace) -> list[str]:
    from remote.allreduce.trace import DEFAULT_KERNELS

    if args.only_kernels and not args.kernels:
        raise UsageError("--only-kernels needs --kernels PATTERN ...")
    return list(args.kernels) if args.only_kernels else [*DEFAULT_KERNELS, *args.kernels]


async def run_sweep_cmd(args: argparse.Namespace) -> int:
    from remote.allreduce.sweep import format_sweep_table, parse_sizes
    from remote.ops import allreduce as ops

    sizes = parse_sizes(args.sizes)
    async with Context.from_args(args, hosts=[args.host]) as ctx:
        host, transport = await ctx.reach(args.host)
        payload = await ops.sweep(transport, host, ctx.bus, ranks=args.ranks, sizes=sizes,
                                  iters=args.iters, warmup=args.warmup, backend=args.backend,
                                  dtype=args.dtype, timeout=args.timeout)
        ctx.show(format_sweep_table(payload))
        return EXIT_OK


async def run_trace_cmd(args: argparse.Namespace) -> int:
    from remote.allreduce.trace import format_trace_table
    from remote.ops import allreduce as ops

    patterns = _patterns(args)
    async with Context.from_args(args, hosts=[]) as ctx:
        payload = ops.trace(ctx.bus, args.files, patterns)
        ctx.show(format_trace_table(payload))
        return EXIT_OK


async def run_capture_cmd(args: argparse.Namespace) -> int:
    from remote.allreduce.trace import format_trace_table
    from remote.ops import allreduce as ops

    patterns = _patterns(args)
    async with Context.from_args(args, hosts=[args.host]) as ctx:
        host, transport = await ctx.reach(args.host)
        payload = await ops.capture(transport, host, ctx.bus, patterns=patterns,
                                    profiler_dir=args.profiler_dir, local_dir=args.out,
                                    seconds=args.seconds, url=args.url,
                                    requests=args.requests, max_tokens=args.max_tokens,
                                    force=args.force)
        ctx.show(format_trace_table(payload))
        return EXIT_OK
