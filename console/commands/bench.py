"""`console bench run | compare | watch`: acceptance and speedup against the box's vLLM.

The server is reached through a port forward to the host's `vllm_url` (nothing is opened on
the box). Results go to a JSON file next to the session (or --out) and onto the event stream as
bench.point / bench.summary, so a replay shows the same figures.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from console.argtypes import add_out_options, add_request_options, add_sampling_options, positive_float, positive_int
from console.context import (
    Context,
    add_common_options,
    add_host_options,
    add_point_size_options,
    add_verbs,
)
from remote.errors import EXIT_OK, UsageError

if TYPE_CHECKING:
    from remote.bench.results import ResultFile
    from remote.ops.bench import SweepSettings

# What a command runs on (httpx, prometheus_client, the bench driver, the tables) is imported in
# the function that runs it: `console --help` and `console bench --help` load none of it.


HELP = "acceptance and speedup benchmarks against the box's vLLM"


def register(p: argparse.ArgumentParser) -> None:
    bsub = add_verbs(p, dest="bench_command",
                     description="Acceptance-rate and speedup benchmarks against the box's "
                                 "vLLM server, reached through an SSH port forward.")

    r = bsub.add_parser("run", help="concurrency sweep against the host's server",
                        description="Sweep concurrencies with streamed fixed-length requests; "
                        "per point: tokens/s, requests/s, TTFT/TPOT p50/p99 and the acceptance "
                        "figures of that window. With a baseline: speedup and crossover.")
    add_host_options(r)
    r.add_argument("--concurrency", default="1,4,16", help="comma-separated (default 1,4,16)")
    r.add_argument("--label", help="name of this run (default: speculative, or baseline)")
    r.add_argument("--model", help="served model name (default: the one the server lists)")
    base = r.add_mutually_exclusive_group()
    base.add_argument("--baseline-url", metavar="URL",
                      help="a server without speculation on the same box, measured first")
    base.add_argument("--baseline", metavar="RESULT.json",
                      help="a baseline result from an earlier `bench run --no-speculation`")
    r.add_argument("--no-speculation", action="store_true",
                   help="the host's server runs without speculation: measure it as a baseline")
    add_request_options(r, max_tokens=256, warmup="sent at once before the first point, their "
                        "answers thrown away; vllm bench serve's --num-warmups defaults to 0")
    add_point_size_options(r)
    r.add_argument("--min-seconds", type=positive_float, metavar="S",
                   help="and keep each point going for at least S seconds")
    add_out_options(r, "result JSON (default: next to the session)",
                    "replace an existing --out FILE (never done without it)")
    r.add_argument("--offline", metavar="BOX_PATH",
                   help="the pipeline's evaluate/acceptance.json on the box: its offline "
                   "estimate is printed beside the served acceptance")
    add_sampling_options(r)
    add_common_options(r, func=run_command)

    c = bsub.add_parser("compare", help="compare a baseline result with a speculative one",
                        description="Speedup per concurrency and crossover from two result "
                        "files: A is the baseline, B the speculative run. Either may be the "
                        "console's own or one written by `vllm bench serve --save-result` "
                        "(--append-result: one run per --max-concurrency).")
    c.add_argument("baseline_file", metavar="A.json",
                   help="a baseline result, or a `bench matrix` result (read alone)")
    c.add_argument("spec_file", metavar="B.json", nargs="?")
    add_common_options(c, record=False, func=compare_command)

    from console.commands.bench_matrix import register_matrix

    register_matrix(bsub)

    w = bsub.add_parser("watch", help="acceptance per scrape interval while the server runs",
                        description="Scrape the spec-decode counters every interval and show "
                        "the acceptance figures of each window.")
    add_host_options(w)
    w.add_argument("--interval", type=positive_float, default=10.0, help="seconds between scrapes")
    w.add_argument("--count", type=positive_int, help="stop after this many windows (default: until ^C)")
    w.add_argument("--model", help="served model name (default: the one the server lists)")
    add_common_options(w, func=watch_command)


def parse_options(options: str, host: str, verb: str = "run") -> argparse.Namespace:
    """The TUI operator's `bench run` (or `matrix`) options, read by this command's own parser:
    they mean the same and are checked the same; a mistake is a UsageError, not an exit."""
    import shlex
    from typing import NoReturn

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            raise UsageError(f"bench options {options!r}: {message}")

    parser = Parser(prog="console", add_help=False)
    register(parser.add_subparsers(dest="command").add_parser("bench"))
    try:
        argv = shlex.split(options)
    except ValueError as exc:
        raise UsageError(f"bench options {options!r}: {exc}") from None
    if any(a in ("-h", "--help") for a in argv):
        raise UsageError(f"bench options: the same as `console bench {verb}` (see its --help)")
    return parser.parse_args(["bench", verb, "--host", host, *argv])


def result_path(args: argparse.Namespace, label: str, session: Path | None = None, *,
                kind: str = "bench") -> Path:
    """Where a result goes: --out (refused if it exists, unless --force), else a new file beside
    the session that records the command, else in the session folder (`kind` names the
    front end: the TUI's are `tui-bench`)."""
    from console.sessions.writer import default_session_dir
    from remote.link.out_files import claim, fresh
    from remote.spine.events import utc_now

    if getattr(args, "out", None):  # `console run --serve` has no --out
        # A measurement is not rewritten from anything: an existing file (an earlier result
        # included) is replaced only with --force.
        return claim(args.out, force=args.force, what="bench result").path
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)
    if session is not None:
        stem = session.name.removesuffix(".zst").removesuffix(".jsonl")
        return fresh(session.with_name(f"{stem}.{kind}-{safe}.json"))
    stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
    return fresh(default_session_dir() / f"{stamp}-{kind}-{safe}.json")


def run_plan(args: argparse.Namespace) -> tuple[SweepSettings, str, ResultFile | None]:
    """`bench run`'s options checked and read as the sweep's settings, its label and the earlier
    result to compare with: the CLI's and the TUI's (parse_options reads the same options)
    in one place."""
    from remote.bench.matrix import parse_concurrency
    from remote.bench.prompts import BUILTIN, load_prompts
    from remote.bench.results import MIN_REQUESTS, load_result
    from remote.ops.bench import SweepSettings

    concurrencies = parse_concurrency(args.concurrency)
    if args.no_speculation and (args.baseline or args.baseline_url):
        raise UsageError("--no-speculation measures a baseline: it takes no other baseline")
    settings = SweepSettings(load_prompts(args.prompts or BUILTIN), concurrencies, model=args.model,
                             max_tokens=args.max_tokens, rounds=args.rounds,
                             min_requests=args.requests or MIN_REQUESTS,
                             min_seconds=args.min_seconds or 0.0, warmup=args.warmup,
                             timeout=args.timeout, ignore_eos=not args.stop_at_eos,
                             temperature=args.temperature,
                             seed=args.seed)
    earlier = load_result(args.baseline) if args.baseline else None
    return settings, args.label or ("baseline" if args.no_speculation else "speculative"), earlier


async def run_command(args: argparse.Namespace) -> int:
    from console.bench_tables import compare_table, point_summary, run_table
    from remote.bench.served import offline_vs_served
    from remote.ops import bench as ops

    settings, label, earlier = run_plan(args)
    async with Context.from_args(args, hosts=[args.host]) as ctx:
        host = ctx.config.host(args.host)
        session = ctx.recorder.writer.path if ctx.recorder else None
        out_path = result_path(args, label, session)  # refused before the box is reached
        t = await ctx.transport(host.name)
        done = await ops.run(t, host, ctx.bus, settings, label=label,
                             out_path=out_path, point_text=point_summary,
                             speculative=not args.no_speculation,
                             baseline_url=args.baseline_url, earlier=earlier,
                             offline_path=args.offline)
        if not args.json:
            if done.measured_baseline is not None:
                ctx.out.write(run_table(done.measured_baseline) + "\n\n")
            ctx.out.write(run_table(done.run) + "\n")
            if done.comparison is not None:
                ctx.out.write("\n" + compare_table(done.comparison) + "\n")
            ctx.out.write(f"result: {done.path}\n")
        if done.served is not None or done.offline is not None:
            ctx.info(offline_vs_served(done.offline, done.served), host.name,
                     offline=done.offline, served=done.served)
        return EXIT_OK


async def compare_command(args: argparse.Namespace) -> int:
    from console.bench_tables import compare_table, point_summary, run_table
    from remote.bench.matrix import FORMAT as MATRIX
    from remote.bench.results import load_result
    from remote.ops import bench as ops

    if _format_of(args.baseline_file) == MATRIX:
        return await _show_matrix(args)
    if args.spec_file is None:
        raise UsageError("bench compare: give A.json and B.json (or one `bench matrix` result)")
    a = load_result(args.baseline_file)
    b = load_result(args.spec_file)
    async with Context.from_args(args) as ctx:
        comparison = ops.compare(ctx.bus, a, b, point_summary)
        ctx.show(run_table(a.run) + "\n\n" + run_table(b.run) + "\n\n" + compare_table(comparison))
        return EXIT_OK


def _format_of(path: str) -> str | None:
    """The file's `format` when it is one JSON object (a `vllm bench serve` file may be JSON
    lines: load_result reads it and says what is wrong)."""
    import json

    try:
        doc = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return doc.get("format") if isinstance(doc, dict) else None


async def _show_matrix(args: argparse.Namespace) -> int:
    """A matrix result read back: its table, recommendations and time split, and the same
    bench.matrix events a live matrix publishes (the TUI and a replay show it)."""
    from console.matrix_tables import matrix_report
    from remote.bench.matrix import load_matrix
    from remote.ops.matrix import publish_found

    if args.spec_file is not None:
        raise UsageError(f"{args.baseline_file} is a bench matrix: compare reads it alone")
    m = load_matrix(args.baseline_file)
    async with Context.from_args(args) as ctx:
        publish_found(ctx.bus, m)
        ctx.show(matrix_report(m))
        return EXIT_OK


async def watch_command(args: argparse.Namespace) -> int:
    from console.bench_tables import watch_table
    from remote.ops import bench as ops

    windows: list[dict[str, object]] = []
    async with Context.from_args(args, hosts=[args.host]) as ctx:
        host, t = await ctx.reach(args.host)
        try:
            await ops.watch(t, host, ctx.bus, interval=args.interval, count=args.count,
                            model=args.model, windows=windows)
        finally:
            if windows:
                ctx.show(watch_table(windows))
        return EXIT_OK
