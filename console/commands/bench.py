"""`console bench run | compare | watch`: acceptance and speedup against the box's vLLM.

The server is reached through a port forward to the host's `vllm_url` (nothing is opened on
the box). Results go to a JSON file next to the session (or --out) and onto the event stream as
bench.point / bench.summary, so a replay shows the same figures.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from console.argtypes import nonneg_int, positive_float, positive_int
from console.context import Context, add_common_options, add_host_options
from remote.errors import EXIT_OK, ConsoleError, UsageError

# What a command runs on (httpx, prometheus_client, the bench driver, the tables) is imported in
# the function that runs it: `console --help` and `console bench --help` load none of it.
if TYPE_CHECKING:
    from collections.abc import Callable

    from remote.bench.prompts import PromptSet
    from remote.bench.results import BenchRun, Point
    from remote.bench.watch import WatchWindow
    from remote.hosts import HostConfig
    from remote.transport import Transport


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("bench", help="acceptance and speedup benchmarks against the box's vLLM",
                       description="Acceptance-rate and speedup benchmarks against the box's "
                       "vLLM server, reached through an SSH port forward.")
    bsub = p.add_subparsers(dest="bench_command", metavar="SUBCOMMAND", required=True)

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
    r.add_argument("--prompts", metavar="FILE",
                   help="JSONL of prompts or conversations (default: the shipped prompt set)")
    r.add_argument("--max-tokens", type=positive_int, default=256, help="output tokens per request (default 256)")
    r.add_argument("--rounds", type=positive_int, default=4,
                   help="requests per point = rounds x concurrency (default 4)")
    r.add_argument("--warmup", type=nonneg_int, default=1, help="unmeasured requests first (default 1)")
    r.add_argument("--timeout", type=positive_float, default=600.0, help="per-request timeout, seconds")
    r.add_argument("--out", metavar="FILE", help="result JSON (default: next to the session)")
    r.add_argument("--offline", metavar="BOX_PATH",
                   help="the pipeline's evaluate/acceptance.json on the box: its offline "
                   "estimate is printed beside the served acceptance")
    r.add_argument("--stop-at-eos", action="store_true",
                   help="end requests at the model's end token (as the offline evaluate does) "
                   "instead of a fixed length")
    add_common_options(r)
    r.set_defaults(func=run_command)

    c = bsub.add_parser("compare", help="compare a baseline result with a speculative one",
                        description="Speedup per concurrency and crossover from two result "
                        "files: A is the baseline, B the speculative run.")
    c.add_argument("baseline_file", metavar="A.json")
    c.add_argument("spec_file", metavar="B.json")
    add_common_options(c, record=False)
    c.set_defaults(func=compare_command)

    w = bsub.add_parser("watch", help="acceptance per scrape interval while the server runs",
                        description="Scrape the spec-decode counters every interval and show "
                        "the acceptance figures of each window.")
    add_host_options(w)
    w.add_argument("--interval", type=positive_float, default=10.0, help="seconds between scrapes")
    w.add_argument("--count", type=positive_int, help="stop after this many windows (default: until ^C)")
    w.add_argument("--model", help="served model name (default: the one the server lists)")
    add_common_options(w)
    w.set_defaults(func=watch_command)


def _check_positive(name: str, value: float) -> None:
    if value <= 0:
        raise UsageError(f"{name} must be positive (got {value})")


def result_path(ctx: Context, args: argparse.Namespace, label: str) -> Path:
    from console.session import default_session_dir
    from remote.events import utc_now

    if getattr(args, "out", None):  # `console run --serve` has no --out
        return Path(args.out).expanduser()
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)
    if ctx.recorder is not None:
        session = ctx.recorder.writer.path
        stem = session.name.removesuffix(".zst").removesuffix(".jsonl")
        return session.with_name(f"{stem}.bench-{safe}.json")
    stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
    return default_session_dir() / f"{stamp}-bench-{safe}.json"


async def _sweep(ctx: Context, t: Transport, host: HostConfig, args: argparse.Namespace,
                 prompts: PromptSet, concurrencies: list[int], url: str, label: str, *,
                 speculative: bool, save_partial: Callable[[BenchRun], None]) -> BenchRun:
    from console.bench_tables import point_summary
    from remote import events as ev
    from remote.bench.driver import LAG_WARN_S, resolve_model, run_sweep
    from remote.bench.reach import vllm_client

    async with vllm_client(t, url, is_local=host.is_local, timeout=args.timeout) as client:
        model = await resolve_model(client, args.model)
        ctx.info(f"{label}: {model} at {client.shown_url}, concurrency "
                 f"{','.join(map(str, concurrencies))}, {len(prompts)} prompts, "
                 f"max_tokens {args.max_tokens}", host.name)

        def on_point(run: BenchRun, p: Point) -> None:
            save_partial(run)
            ctx.bus.emit(ev.BENCH_POINT, host.name, label=label, url=client.shown_url,
                         model=model, **p.to_dict(), summary=point_summary(label, p))
            if p.failed:
                ctx.warning(f"{label} c={p.concurrency}: {p.failed} of {p.requests} requests "
                            f"failed: {p.errors[0]}", host.name)
            if p.loop_lag_p99 is not None and p.loop_lag_p99 > LAG_WARN_S:
                ctx.warning(f"{label} c={p.concurrency}: the console's event loop lagged "
                            f"{p.loop_lag_p99 * 1000:.0f} ms (p99): the load driver may be the "
                            "bottleneck at this concurrency, not the server", host.name)

        return await run_sweep(
            client, prompts, concurrencies, label=label, model=model, speculative=speculative,
            max_tokens=args.max_tokens, rounds=args.rounds, warmup=args.warmup, host=host.name,
            on_point=on_point, ignore_eos=not args.stop_at_eos)


async def run_command(args: argparse.Namespace) -> int:
    import asyncio

    from console.bench_tables import compare_table, run_table
    from remote import events as ev
    from remote.bench.compare import compare_runs
    from remote.bench.driver import check_server, parse_concurrency
    from remote.bench.prompts import BUILTIN, load_prompts
    from remote.bench.reach import vllm_client
    from remote.bench.results import load_result, save_result
    from remote.bench.served import offline_vs_served, sweep_acceptance

    concurrencies = parse_concurrency(args.concurrency)
    _check_positive("--max-tokens", args.max_tokens)
    _check_positive("--rounds", args.rounds)
    _check_positive("--timeout", args.timeout)
    if args.warmup < 0:
        raise UsageError("--warmup must not be negative")
    if args.no_speculation and (args.baseline or args.baseline_url):
        raise UsageError("--no-speculation measures a baseline: it takes no other baseline")
    prompts = load_prompts(args.prompts or BUILTIN)
    earlier = load_result(args.baseline) if args.baseline else None
    label = args.label or ("baseline" if args.no_speculation else "speculative")
    ctx = Context.from_args(args, hosts=[args.host])
    try:
        host = ctx.host(args.host)
        t = await ctx.transport(host.name)
        offline = await _offline(t, args.offline) if args.offline else None

        baseline: BenchRun | None = earlier.run if earlier else None
        measured_baseline: BenchRun | None = None
        out_path = result_path(ctx, args, label)

        saved: list[Path] = []

        def save_partial_baseline(partial: BenchRun) -> None:
            saved.append(save_result(out_path, None, baseline=partial, complete=False))

        def save_partial_run(partial: BenchRun) -> None:
            saved.append(save_result(out_path, partial, baseline=measured_baseline,
                                     complete=False))

        if earlier is not None and not earlier.complete:
            ctx.warning(f"baseline {earlier.path} is incomplete (its sweep stopped early)",
                        host.name)
        try:
            if args.baseline_url:
                # The speculative server is checked before the baseline sweep, not after it.
                async with vllm_client(t, host.vllm_url, is_local=host.is_local) as client:
                    await check_server(client, args.model,
                                       speculative=not args.no_speculation)
                measured_baseline = await _sweep(ctx, t, host, args, prompts, concurrencies,
                                                 args.baseline_url, "baseline", speculative=False,
                                                 save_partial=save_partial_baseline)
                baseline = measured_baseline
            run = await _sweep(ctx, t, host, args, prompts, concurrencies, host.vllm_url, label,
                               speculative=not args.no_speculation, save_partial=save_partial_run)
        except (ConsoleError, asyncio.CancelledError):
            if saved:
                ctx.warning(f"the sweep stopped early: the points measured are kept in {out_path}",
                            host.name)
            raise

        served = sweep_acceptance(run.points) if not args.no_speculation else None
        comparison = compare_runs(baseline, run) if baseline is not None else None
        path = save_result(out_path, run, baseline=measured_baseline,
                           comparison=comparison.to_dict() if comparison else None)
        if comparison is not None:
            for w in comparison.warnings:
                ctx.warning(w, host.name)
            ctx.bus.emit(ev.BENCH_SUMMARY, host.name, label=label, result_file=str(path),
                         **comparison.to_dict(), summary=comparison.summary())
        else:
            best = max(run.points, key=lambda p: p.output_tok_s)
            ctx.bus.emit(ev.BENCH_SUMMARY, host.name, label=label, result_file=str(path),
                         points=len(run.points), rows=[], crossover=None,
                         summary=f"{label}: {len(run.points)} points, best "
                         f"{best.output_tok_s:.1f} tok/s at c={best.concurrency}")
        if not args.json:
            if measured_baseline is not None:
                ctx.out.write(run_table(measured_baseline) + "\n\n")
            ctx.out.write(run_table(run) + "\n")
            if comparison is not None:
                ctx.out.write("\n" + compare_table(comparison) + "\n")
            ctx.out.write(f"result: {path}\n")
        if served is not None or offline is not None:
            ctx.info(offline_vs_served(offline, served), host.name, offline=offline,
                     served=served)
        return EXIT_OK
    finally:
        await ctx.aclose()


async def _offline(t: Transport, box_path: str) -> dict[str, object]:
    """evaluate/acceptance.json fetched from the box (SFTP; a copy on `local`)."""
    import tempfile

    from remote.serve import read_offline

    with tempfile.TemporaryDirectory(prefix="eagle3-offline-") as tmp:
        local = Path(tmp) / "acceptance.json"
        try:
            await t.get(box_path, local)
        except (OSError, ConsoleError) as exc:
            raise UsageError(f"--offline {box_path}: cannot read it on the box ({exc})") from None
        return read_offline(local)


async def compare_command(args: argparse.Namespace) -> int:
    from console.bench_tables import compare_table
    from remote import events as ev
    from remote.bench.compare import compare_runs
    from remote.bench.results import load_result

    a = load_result(args.baseline_file)
    b = load_result(args.spec_file)
    comparison = compare_runs(a.run, b.run)
    ctx = Context.from_args(args)
    try:
        for f in (a, b):
            if not f.complete:
                ctx.warning(f"{f.path} is incomplete (its sweep stopped early)")
        ctx.bus.emit(ev.BENCH_SUMMARY, "", label=b.run.label, baseline_file=str(a.path),
                     result_file=str(b.path), **comparison.to_dict(),
                     summary=comparison.summary())
        if not args.json:
            ctx.out.write(compare_table(comparison) + "\n")
        return EXIT_OK
    finally:
        await ctx.aclose()


async def watch_command(args: argparse.Namespace) -> int:
    from console.bench_tables import watch_table
    from remote import events as ev
    from remote.bench.driver import resolve_model
    from remote.bench.reach import vllm_client
    from remote.bench.watch import watch

    _check_positive("--interval", args.interval)
    if args.count is not None:
        _check_positive("--count", args.count)
    ctx = Context.from_args(args, hosts=[args.host])
    windows: list[dict[str, object]] = []
    try:
        host = ctx.host(args.host)
        t = await ctx.transport(host.name)
        async with vllm_client(t, host.vllm_url, is_local=host.is_local) as client:
            model = await resolve_model(client, args.model)
            ctx.info(f"watching spec-decode acceptance of {model} at {client.shown_url} "
                     f"every {args.interval:g} s", host.name)

            def on_window(w: WatchWindow) -> None:
                payload = {"window": w.index, "seconds": w.seconds, "model": model,
                           "acceptance": w.acceptance.to_dict(),
                           "accepted_tok_s": w.accepted_tok_s, "drafted_tok_s": w.drafted_tok_s}
                windows.append(payload)
                ctx.bus.emit(ev.BENCH_WATCH, host.name, **payload,
                             summary=f"window {w.index} ({w.seconds:.1f} s): "
                             f"{w.acceptance.drafts:.0f} drafts, {w.acceptance.short()}")

            def on_reset(message: str) -> None:
                ctx.warning(message + " (watch continues from the new counters)", host.name)

            try:
                await watch(client, model, interval=args.interval, count=args.count,
                            on_window=on_window, on_reset=on_reset)
            finally:
                if windows and not args.json:
                    ctx.out.write(watch_table(windows) + "\n")
        return EXIT_OK
    finally:
        await ctx.aclose()
