"""`console bench matrix`: which speculation to ship, measured (remote/ops/matrix.py).

    console bench matrix --host H --demo --drafts none,ngram,pipeline,/models/head2 \
        --k 1,3 --temperature 0,0.7 --concurrency 1,4 --requests 8 --max-tokens 32

Prints the plan and an estimate, then a line per cell as it is measured (with the ETA), then
the matrix table, one recommendation line per concurrency (`c=N: ...`), where the time went and
the result file's path. The default result file is named by the plan (host, drafts, K,
temperatures, concurrencies, prompts, sizes): the same command run again after an interrupt
continues it and measures only the cells it lacks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from console.argtypes import Subcommands, positive_int
from console.context import Context, add_common_options, add_host_options
from remote.errors import EXIT_FAILED, EXIT_OK, UsageError

if TYPE_CHECKING:
    from remote.bench.matrix import MatrixPlan, MatrixResult
    from remote.bench.prompts import PromptSet

DEFAULT_REQUESTS = 8  # per cell, over its rounds: a matrix multiplies every cell it has


def register_matrix(bsub: Subcommands) -> None:
    from console.argtypes import (
        add_engine_options,
        add_out_options,
        add_pipeline_source,
        add_request_options,
        add_sampling_options,
    )

    m = bsub.add_parser(
        "matrix", help="drafts x K x temperature x concurrency against the baseline, one "
        "engine at a time: the table and a recommendation per concurrency",
        description="Start one vLLM server per (draft, K) on the host in turn (the baseline, "
        "no speculation, first), measure it at every temperature and concurrency, stop it; "
        "then print the matrix (tokens/s, TTFT/TPOT p50/p99, acceptance length and rate, "
        "speedup over the baseline with the spread of its rounds), one `c=N:` recommendation "
        "per concurrency and where the time went. Rerun after an interrupt: it keeps the "
        "cells it finished.")
    add_host_options(m)
    add_pipeline_source(m.add_mutually_exclusive_group())
    m.add_argument("--drafts", default="none,pipeline",
                   help="comma-separated: none, ngram, pipeline (the pipeline's head) or a "
                   "head directory on the box (default none,pipeline; none is always measured)")
    m.add_argument("--k", default="3", metavar="K,K",
                   help="num_speculative_tokens values, comma-separated (default 3)")
    add_sampling_options(m, several=True)
    m.add_argument("--concurrency", default="1,4", help="comma-separated (default 1,4)")
    add_request_options(m, max_tokens=64, warmup="after each engine start")
    m.add_argument("--requests", type=positive_int, default=DEFAULT_REQUESTS, metavar="N",
                   help=f"requests per cell, over its rounds (default {DEFAULT_REQUESTS}; each "
                   "round sends the same count, at least the concurrency: rounded up, and the "
                   "plan line says the count sent)")
    m.add_argument("--rounds", type=positive_int, default=3,
                   help="measured windows per cell: the spread of the speedup (default 3)")
    add_engine_options(m, start="each engine")
    add_out_options(m, "result JSON (default: named by the plan, in the session folder); an "
                    "unfinished matrix of the same plan there is continued",
                    "start over even when --out holds a matrix (finished or not)")
    add_common_options(m, func=matrix_command)


def matrix_plan(args: argparse.Namespace) -> tuple[MatrixPlan, PromptSet]:
    """The options checked and read as the plan (the TUI's `M` reads the same options)."""
    from remote.bench.matrix import MatrixPlan, parse_concurrency, parse_drafts, parse_list
    from remote.bench.prompts import BUILTIN, load_prompts

    if args.demo == bool(args.pipeline):
        raise UsageError("give --pipeline FILE or --demo (the target every server serves)")
    if args.pipeline and not Path(args.pipeline).expanduser().is_file():
        raise UsageError(f"{args.pipeline}: pipeline config not found")
    prompts = load_prompts(args.prompts or BUILTIN)
    plan = MatrixPlan(
        drafts=parse_drafts(args.drafts), ks=parse_list(args.k, "--k", int),
        temperatures=parse_list(args.temperature, "--temperature", float),
        concurrencies=parse_concurrency(args.concurrency), max_tokens=args.max_tokens,
        requests=args.requests, rounds=args.rounds, prompts=prompts.name,
        prompts_sha256=prompts.sha256, seed=args.seed, warmup=args.warmup,
        ignore_eos=not args.stop_at_eos,
        target="demo" if args.demo else str(Path(args.pipeline).expanduser().resolve()))
    return plan, prompts


def matrix_path(args: argparse.Namespace, plan: MatrixPlan) -> Path:
    """--out, else a name the plan decides: the same command finds its own unfinished file."""
    from console.sessions.writer import default_session_dir

    if args.out:
        return Path(args.out).expanduser()
    digest = hashlib.sha256(json.dumps([args.host, plan.to_dict()], sort_keys=True)
                            .encode()).hexdigest()[:12]
    return default_session_dir() / f"matrix-{args.host}-{digest}.json"


def resume_or_new(path: Path, plan: MatrixPlan, host: str, *, force: bool) -> MatrixResult:
    """A matrix of this plan already at `path` is continued (its cells kept); another file
    there is refused unless --force; --force starts over."""
    from remote.bench.matrix import MatrixResult, load_matrix
    from remote.errors import ResultFileError
    from remote.spine.events import format_ts, utc_now

    fresh = MatrixResult(plan, host=host, started=format_ts(utc_now()), path=path)
    if force or not path.exists():
        return fresh
    try:
        earlier = load_matrix(path)
    except ResultFileError as exc:
        raise UsageError(f"--out {path} holds something else ({exc}): choose another file, "
                         "or --force to replace it") from None
    if earlier.plan != plan:
        raise UsageError(f"{path} is a matrix of another plan: choose another --out, or "
                         "--force to start over")
    return earlier


async def matrix_command(args: argparse.Namespace) -> int:
    from console.matrix_tables import matrix_report, plan_text
    from remote.bench.matrix import estimate_seconds
    from remote.ops import matrix as mops
    from remote.ops import serve as sops

    plan, prompts = matrix_plan(args)
    pipeline, vllm_args = sops.options(args.pipeline, args.vllm_args, demo=args.demo)
    path = matrix_path(args, plan)
    m = resume_or_new(path, plan, args.host, force=args.force)
    async with Context.from_args(args, hosts=[args.host]) as ctx:
        host = ctx.config.host(args.host)
        ctx.info(plan_text(plan, m, estimate_seconds(plan, m.missing()), path), host.name)
        runner = await sops.server(await ctx.transport(host.name), host, ctx.bus, python=args.python)
        try:
            m = await mops.run_matrix(runner, m, prompts, pipeline=pipeline, vllm_args=vllm_args,
                                      out_path=path, start_timeout=args.start_timeout,
                                      request_timeout=args.timeout)
        finally:
            await runner.close()
        ctx.show(matrix_report(m) + f"\nresult: {path}")
        return EXIT_OK if m.complete else EXIT_FAILED
