"""`console run --host H`: the EAGLE-3 pipeline on a host, headless and recorded.

    console run --host local --demo                 the tiny CPU demo (what `make demo` runs)
    console run --host box --pipeline box.toml      a real pipeline config
    console run ... --from train                    re-run train and everything after it
    console run ... --force                         re-run every stage
    console run ... --serve [--serve-python PY]     then serve + bench: baseline and speculative
                                                    servers one after the other, ending with
                                                    "offline X vs served Y" (make demo does this)
    console run --host box                          environment check only (no pipeline)
    console run ... [--reassign HOST] [--reassign-lost] [--relay-through-console]
                                                    with [extract] hosts: extract sharded
                                                    across boxes (console/sharded_run.py)

`--config` is the console.toml of every command; given a pipeline TOML instead (recognised by
its top-level output_dir or [target] table) it is taken as --pipeline, so the spelling in the
issue (`console run --config pipeline.toml`) works too.

The pipeline package is uploaded to the box (content-hashed; run in place on `local`), the
config is validated there before any work, and ONE detached runner on the box carries every
remaining stage through evaluate (pipeline/sequence.py); this command only follows its log,
whose progress records become stage events (remote/pipeline_runner.py). Quitting, a kill or a
dropped connection leave the box going on; running this command again while it runs attaches
to it (the job lock) instead of starting another. A stage whose manifest matches is skipped, so
a second run of the same config does nothing. At the end it prints each stage's manifest (time,
size) and where the checkpoint, the serving JSON and the session file are.
"""

from __future__ import annotations

import argparse
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.argtypes import positive_int
from console.context import Context, add_common_options, add_host_options, add_point_size_options
from remote.errors import EXIT_FAILED, EXIT_OK, StageFailed, UsageError

# The runner (asyncio, the SSH transport, msgspec events) is imported where it runs; the stage
# names come from `pipeline` itself (no imports): `console run --help` loads none of the runner.
if TYPE_CHECKING:
    from remote.link.hosts import HostConfig
    from remote.link.transport import Transport
    from remote.pipeline_runner import PipelineRunner


HELP = "run the EAGLE-3 pipeline on a host (headless, recorded)"


def register(p: argparse.ArgumentParser) -> None:
    from pipeline import stages as stage_table  # `console --help` reads HELP alone

    stages = stage_table.names()
    p.description = (f"Run the EAGLE-3 pipeline ({', '.join(stages)}) on a "
                     "host as one detached run that the box carries to the end, follow it, "
                     "and record the session.")
    add_host_options(p)
    p.add_argument("--pipeline", metavar="FILE", help="pipeline config (TOML) on this machine")
    p.add_argument("--demo", action="store_true",
                   help="build and run the tiny local demo (tiny target, tokenizer, conversations)")
    p.add_argument("--from", dest="start", choices=stages, metavar="STAGE",
                   help=f"re-run STAGE and every stage after it ({', '.join(stages)})")
    p.add_argument("--force", action="store_true", help="re-run every stage")
    p.add_argument("--until", choices=stages, metavar="STAGE",
                   help="stop after STAGE (e.g. extract: hidden states only)")
    p.add_argument("--reassign", action="append", metavar="HOST",
                   help="sharded extract (extract.hosts): HOST is lost, run its shard on the "
                   "other boxes (repeatable, or a,b)")
    p.add_argument("--reassign-lost", action="store_true",
                   help="sharded extract: a box lost mid-run has its shard rerun on another box")
    p.add_argument("--relay-through-console", action="store_true",
                   help="sharded extract: a box that neither shares the training box's output "
                   "storage nor can be reached by it for a box-to-box copy sends its hidden "
                   "states through this machine (it prints the bytes and the estimated time "
                   "first); without it such a box is refused")
    p.add_argument("--serve", action="store_true",
                   help="after the pipeline: serve the target without and with the trained head "
                   "(one vLLM at a time), bench both, print offline vs served acceptance")
    p.add_argument("--baseline-url", metavar="URL",
                   help="with --serve: where the baseline server listens, as seen from the box "
                   "(default: the host's vllm_url with its port + 1)")
    p.add_argument("--serve-python", metavar="PATH",
                   help="the python with vLLM on the box (default: the host's python)")
    p.add_argument("--concurrency", default="1,4",
                   help="with --serve: bench concurrencies (default 1,4)")
    add_point_size_options(p, when="with --serve: ")
    p.add_argument("--max-tokens", type=positive_int,
                   help="with --serve: output tokens per request (default: evaluate's "
                   "max_new_tokens)")
    p.add_argument("--vllm-args", metavar="'ARGS'",
                   help="with --serve: extra vLLM arguments, one shell-quoted string (default "
                   "for --demo: '--enforce-eager', see remote/serving/serve.py DEMO_VLLM_ARGS)")
    add_common_options(p, func=run)


_CHECK = (
    "import json, platform, sys, os;"
    "print(json.dumps({'python': sys.version.split()[0], 'executable': sys.executable,"
    " 'platform': platform.platform(), 'hostname': platform.node(), 'cpus': os.cpu_count()}))"
)


async def _environment_check(ctx: Context, host: str, python: str) -> int:
    """No pipeline given: a short, recorded look at the box's python (what `console run`
    did before the pipeline existed; still the cheapest "can I reach it" check)."""
    import json

    from remote.spine import events as ev
    ctx.info("no --pipeline or --demo given: environment check only", host)
    done = await (await ctx.transport(host)).run([python, "-c", _CHECK], timeout=60)
    if done.returncode != 0:
        ctx.error(f"environment check failed (exit {done.returncode}): {done.stderr.strip()}",
                  host)
        return EXIT_FAILED
    try:
        info = json.loads(done.stdout)
    except ValueError:
        ctx.error(f"environment check printed no JSON: {done.stdout[:200]!r}", host)
        return EXIT_FAILED
    ctx.bus.emit(ev.PROBE_RESULT, host, probe="check", result=info,
                 summary=f"python {info['python']} on {info['hostname']} ({info['cpus']} CPUs)")
    return EXIT_OK


def _toml(path: str) -> dict[str, Any]:
    """A local TOML file as written ({} where it cannot be read): the box validates it again."""
    import tomllib

    try:
        return tomllib.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _extract_hosts(path: str) -> list[str]:
    """`[extract] hosts` as written in the local pipeline TOML."""
    section = _toml(path).get("extract")  # not a stage: the TOML's [extract] section
    hosts = section.get("hosts") if isinstance(section, dict) else None
    return [h for h in hosts if isinstance(h, str)] if isinstance(hosts, list) else []


def _serve_urls(args: argparse.Namespace) -> dict[str, str] | None:
    return {"baseline": args.baseline_url} if args.baseline_url else None


async def _check_serve_ports(transport: Transport, host: HostConfig,
                             args: argparse.Namespace) -> None:
    from remote.serving.serve import check_port_free, default_url

    for role in ("baseline", "speculative"):
        url = (_serve_urls(args) or {}).get(role) or default_url(host, role)
        await check_port_free(transport, args.serve_python or host.python, url, role,
                              host.name)


async def serve_step(ctx: Context, args: argparse.Namespace, runner: PipelineRunner,
                     config: str, out_dir: str, resolved: dict[str, Any]) -> int:
    """The closing step: baseline and speculative servers in turn, benched alike."""
    from console.bench_tables import compare_table, point_summary, run_table
    from console.commands.bench import result_path
    from remote.bench.matrix import parse_concurrency
    from remote.bench.results import MIN_REQUESTS
    from remote.bench.served import offline_vs_served
    from remote.errors import EngineFailed
    from remote.ops import serve as serve_ops

    host = runner.host
    concurrencies = parse_concurrency(args.concurrency)
    max_tokens = args.max_tokens or int(resolved.get("max_new_tokens") or 24)
    _, vllm_args = serve_ops.options(None, args.vllm_args, demo=args.demo)
    server = await serve_ops.server(runner.transport, host, ctx.bus, python=args.serve_python)
    ctx.info(f"serve + bench on {host.name} with {server.host.python}: baseline server, then "
             f"the trained head; concurrency {','.join(map(str, concurrencies))}, "
             f"{max_tokens} tokens per request, "
             + (f"{args.rounds} x concurrency requests per point" if args.rounds is not None
                else f"at least {args.requests or MIN_REQUESTS} requests per point"), host.name)
    try:
        result, _ = await serve_ops.serve_and_bench_step(
            server, config, out_dir, concurrencies=concurrencies, max_tokens=max_tokens,
            rounds=args.rounds, min_requests=args.requests or MIN_REQUESTS,
            vllm_args=vllm_args,
            out_path=result_path(args, "served", ctx.recorder.writer.path if ctx.recorder else None),
            point_text=point_summary, urls=_serve_urls(args))
    except EngineFailed as exc:
        ctx.error(str(exc), host.name)
        return EXIT_FAILED
    ctx.show(run_table(result.baseline) + "\n\n" + run_table(result.speculative) + "\n\n"
             + compare_table(result.comparison))
    ctx.info(offline_vs_served(result.offline, result.served), host.name,
             offline=result.offline, served=result.served)
    return EXIT_OK


async def run(args: argparse.Namespace) -> int:
    import asyncio

    from pipeline import stages as stage_table
    from remote.ops import pipeline as pipeline_ops
    from remote.pipeline_runner import PipelineRunner, run_config
    from remote.spine import events as ev
    from remote.spine.stage_life import DONE, SKIPPED

    # a pipeline TOML (its output_dir or [target]) given as --config is --pipeline
    if args.config and not args.pipeline and {"output_dir", "target"} & _toml(args.config).keys():
        args.pipeline, args.config = args.config, None
    if args.demo and args.pipeline:
        raise UsageError("--demo builds its own pipeline config: give --demo or --pipeline")
    if args.pipeline and not Path(args.pipeline).expanduser().is_file():
        raise UsageError(f"{args.pipeline}: pipeline config not found")
    if args.serve and args.until not in (None, stage_table.EVALUATE):
        raise UsageError("--serve needs the trained head: it cannot follow --until "
                         f"{args.until}")
    if args.serve and not (args.demo or args.pipeline):
        raise UsageError("--serve follows a pipeline: give --demo or --pipeline")
    if args.rounds is not None and args.requests is not None:
        raise UsageError("--rounds and --requests: give one (rounds x concurrency, or a "
                         "minimum per point)")
    if args.baseline_url is not None:
        from remote.bench.reach import parse_vllm_url

        if not args.serve:
            raise UsageError("--baseline-url is for --serve (the baseline server's address)")
        parse_vllm_url(args.baseline_url)
    shard_hosts = _extract_hosts(args.pipeline) if args.pipeline else []
    if shard_hosts:
        from console.sharded_run import check_names

        check_names(args, shard_hosts)
    # The shard boxes are the session's hosts too: a replay lists every box of the run.
    hosts = list(dict.fromkeys([args.host, *shard_hosts]))
    async with Context.from_args(args, hosts=hosts) as ctx:
        host, transport = await ctx.reach(args.host)
        if host.is_local:  # an SSH link says it itself (remote/link/ssh.py): once, not twice
            ctx.bus.emit(ev.CONNECTION_UP, host.name, summary=f"connected to {host.name}")
        if not args.demo and not args.pipeline:
            return await _environment_check(ctx, host.name, host.python)
        runner = PipelineRunner(transport, host, ctx.bus)
        if args.serve:
            # Before the pipeline's minutes: a taken port is said now, not after training.
            await _check_serve_ports(transport, host, args)
        config: str | None = None
        demo_dir: str | None = None
        if args.demo:
            demo_dir = posixpath.join(await runner.root(), pipeline_ops.DEMO_DIR)
        else:
            config = await runner.remote_config(Path(args.pipeline).expanduser())
        try:
            checked = await runner.validate(config) if config else {}
            if checked.get("extract_hosts"):
                from console.sharded_run import run_sharded

                outcome = await run_sharded(ctx, args, runner, config or "", checked)
            else:
                if args.reassign or args.reassign_lost or args.relay_through_console:
                    raise UsageError("--reassign, --reassign-lost and --relay-through-console "
                                     "are for a sharded extraction: the pipeline config has no "
                                     "extract.hosts")
                outcome = await pipeline_ops.run_pipeline(runner, config, demo_dir=demo_dir,
                                                          start=args.start, force=args.force,
                                                          until=args.until,
                                                          reach=ctx.reach)
        except StageFailed as exc:
            ctx.error(str(exc), host.name)
            return EXIT_FAILED
        except asyncio.CancelledError:
            # Ctrl-C: the box runner is a detached job and carries on through evaluate.
            ctx.warning(f"interrupted: the pipeline keeps running on {host.name} through "
                        f"evaluate; `console run` again (or the TUI) reattaches to it, "
                        f"`console jobs --host {host.name}` lists it", host.name)
            raise
        # The run's own config: an attached run may have been started with another one.
        config = run_config(outcome.info.argv if outcome.info else []) or config or ""
        resolved = await runner.validate(config)
        out_dir = str(resolved["output_dir"])
        ran, skipped = outcome.names(DONE), outcome.names(SKIPPED)
        ctx.info(f"pipeline done on {host.name}: ran {', '.join(ran) or 'nothing'}; "
                 f"skipped {', '.join(skipped) or 'nothing'}", host.name,
                 ran=ran, skipped=skipped)
        evaluate = outcome.stages.get(stage_table.EVALUATE)
        evaluated = evaluate.result if evaluate is not None and evaluate.result else None
        if evaluated:
            line = f"offline mean acceptance length {evaluated.get('mean_length', 0):.3f}"
            if "untrained_mean_length" in evaluated:
                line += f" (untrained head: {evaluated['untrained_mean_length']:.3f})"
            ctx.info(line, host.name, acceptance=evaluated)
        if args.until not in (None, stage_table.EVALUATE):
            ctx.info(f"stopped after {args.until} (--until): outputs under {out_dir}", host.name)
            return EXIT_OK
        head = posixpath.join(out_dir, stage_table.TRAIN)
        ctx.info(f"checkpoint: {posixpath.join(head, 'checkpoint')}", host.name)
        ctx.info(f"serving JSON: {posixpath.join(head, 'speculative_config.json')} "
                 "(vllm serve ... --speculative-config \"$(cat it)\")", host.name)
        ctx.info(f"evaluation: {posixpath.join(out_dir, stage_table.EVALUATE, 'acceptance.json')}",
                 host.name)
        if args.serve:
            # `resolved` is the run's own validation: a second one costs seconds of imports.
            return await serve_step(ctx, args, runner, config, out_dir, resolved)
        return EXIT_OK
