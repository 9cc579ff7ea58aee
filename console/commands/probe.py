"""`console probe NAME --host H`: ask the box what it has before launching.

The probes, their options, what they need and what their results mean are their rows in
remote/probe_table.py; one host or several run the same route (console/commands/probe_fleet.py
run_one, then remote/ops/probes.py). compat exits 4 when a finding of severity `error` says a stage will fail
as things stand.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from console.argtypes import add_pipeline_source, positive_float
from console.context import Context, add_common_options, add_host_options, add_verbs
from remote import probe_table
from remote.errors import UsageError

# The probe route and the compat advisor (the SSH transport, packaging, msgspec events) are
# imported where they run: `console probe --help` loads none of it.


HELP = "run a diagnostic probe on a host (" + ", ".join(probe_table.names()) + ")"


def register(p: argparse.ArgumentParser) -> None:
    """One verb per probe row, each with the same options (a row that takes a head adds its
    DIR, --target, --demo and --pipeline): a verb of its own so that `probe head --host H DIR`
    parses, where an optional positional beside the probe's name would have been taken, empty,
    before --host.
    As with every command made of verbs, the options follow the probe's name."""
    psub = add_verbs(p, dest="probe", metavar="PROBE", description=(
        "Upload a stdlib-only probe to the host and run it with the host's python. "
        + " ".join(f"{row.name}: {row.help}." for row in probe_table.TABLE)))
    for row in probe_table.TABLE:
        v = psub.add_parser(row.name, help=row.help)
        if row.takes_head:
            v.add_argument("head_dir", nargs="?", metavar="DIR",
                           help="the EAGLE-3 head directory on the host (default with --demo or "
                           "--pipeline: that pipeline's own head)")
        _options(v, head=row.takes_head)
        v.set_defaults(func=run)


def _options(p: argparse.ArgumentParser, *, head: bool) -> None:
    add_host_options(p, fleet=True)
    p.add_argument("--model", metavar="PATH", help="HF model directory or config.json on the host")
    p.add_argument("--arch", metavar="NAME", help="architecture name (instead of, or overriding, --model)")
    p.add_argument("--family", metavar="NAME", help="model family for `source` (e.g. kimi)")
    p.add_argument("--all", action="store_true", help="model: every architecture in vLLM's registry")
    p.add_argument("--vllm-root", metavar="DIR", help="the vllm package directory on the host (default: installed)")
    if head:
        p.add_argument("--target", metavar="DIR",
                       help="the target's HF directory on the host (or --demo, --pipeline)")
        add_pipeline_source(p, of="the target of ")
    else:
        p.set_defaults(head_dir=None, target=None, demo=False, pipeline=None)
    p.add_argument("--timeout", type=positive_float, default=600.0, help="seconds to wait for a probe (default 600)")
    add_common_options(p)


def _head_usage(args: argparse.Namespace) -> str | None:
    """What is wrong with a head-taking probe's own options (DIR, --target, --demo,
    --pipeline); the other probes' verbs have none of them."""
    given = [o for o, v in (("DIR", args.head_dir), ("--target", args.target),
                            ("--demo", args.demo), ("--pipeline", args.pipeline)) if v]
    targets = [o for o in given if o != "DIR"] + (["--model"] if args.model else [])
    if len(targets) != 1:
        return (f"probe {args.probe} needs one target: --target DIR, --demo or --pipeline FILE"
                + (f" (got {', '.join(targets)})" if targets else ""))
    if not args.head_dir and not (args.demo or args.pipeline):
        return (f"probe {args.probe} needs the head directory: console probe {args.probe} "
                "--host H DIR --target DIR")
    if args.pipeline and not Path(args.pipeline).expanduser().is_file():
        return f"{args.pipeline}: pipeline config not found"
    return None


async def run(args: argparse.Namespace) -> int:
    row = probe_table.get(args.probe)
    bad = _head_usage(args) if row.takes_head else None
    if bad:
        raise UsageError(bad)
    if row.takes_head and (args.demo or args.pipeline):
        return await _head_of_pipeline(args)
    from console.commands.probe_fleet import request, run_fleet, run_one
    from console.fleet import names_several

    missing = row.needs(request(args))
    if missing:
        raise UsageError(missing)

    if names_several(args):
        return await run_fleet(args)
    async with Context.from_args(args, hosts=[args.host]) as ctx:
        return await run_one(ctx, args, args.host)


async def _head_of_pipeline(args: argparse.Namespace) -> int:
    """probe NAME (a row that takes a head) --demo | --pipeline FILE: the target (and, without
    DIR, the head) that pipeline config names, resolved on the box, then the probe."""
    from console.commands.probe_fleet import run_one
    from remote.ops import serve

    async with Context.from_args(args, hosts=[args.host]) as ctx:
        host, transport = await ctx.reach(args.host)
        pipeline = Path(args.pipeline).expanduser() if args.pipeline else None
        target = await serve.pipeline_target(transport, await serve.probe_python(transport, host),
                                             ctx.bus, pipeline=pipeline)
        args.target, args.head_dir = target.model, args.head_dir or target.head
        return await run_one(ctx, args, args.host)
