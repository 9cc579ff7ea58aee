"""`console probe NAME --host H`: ask the box what it has before launching.

The probes, their options, what they need and what their results mean are their rows in
remote/probe_table.py; one host or several (console/commands/probe_fleet.py) run the same route,
remote/ops/probes.py. compat exits 4 when a finding of severity `error` says a stage will fail
as things stand.
"""

from __future__ import annotations

import argparse

from console.argtypes import positive_float
from console.context import Context, add_common_options, add_host_options
from remote import probe_table
from remote.errors import UsageError

# The probe route and the compat advisor (the SSH transport, packaging, msgspec events) are
# imported where they run: `console probe --help` loads none of it.


HELP = "run a diagnostic probe on a host (" + ", ".join(probe_table.names()) + ")"


def register(p: argparse.ArgumentParser) -> None:
    p.description = ("Upload a stdlib-only probe to the host and run it with the host's python. "
                     + " ".join(f"{row.name}: {row.help}." for row in probe_table.TABLE))
    p.add_argument("probe", choices=probe_table.names())
    add_host_options(p, fleet=True)
    p.add_argument("--model", metavar="PATH", help="HF model directory or config.json on the host")
    p.add_argument("--arch", metavar="NAME", help="architecture name (instead of, or overriding, --model)")
    p.add_argument("--family", metavar="NAME", help="model family for `source` (e.g. kimi)")
    p.add_argument("--all", action="store_true", help="model: every architecture in vLLM's registry")
    p.add_argument("--vllm-root", metavar="DIR", help="the vllm package directory on the host (default: installed)")
    p.add_argument("--timeout", type=positive_float, default=600.0, help="seconds to wait for a probe (default 600)")
    add_common_options(p)
    p.set_defaults(func=run)


def request(args: argparse.Namespace) -> probe_table.ProbeRequest:
    """The operator's options as the probes' rows read them."""
    return probe_table.ProbeRequest(model=args.model, arch=args.arch, family=args.family,
                                    vllm_root=args.vllm_root, all=args.all)


async def run(args: argparse.Namespace) -> int:
    missing = probe_table.get(args.probe).needs(request(args))
    if missing:
        raise UsageError(missing)
    from console.fleet import names_several

    if names_several(args):
        from console.commands.probe_fleet import run_fleet

        return await run_fleet(args)
    async with Context.from_args(args, hosts=[args.host]) as ctx:
        return await run_one(ctx, args, args.host)


async def run_one(ctx: Context, args: argparse.Namespace, name: str) -> int:
    """The probe on one host (alone, or one of a fleet): its exit code, having said what its
    results mean (the results themselves are probe.result events)."""
    from remote.ops import probes as ops

    host, transport = await ctx.reach(name)
    done = await ops.run(transport, host, ctx.bus, args.probe, request(args),
                         timeout=args.timeout)
    say = {"error": ctx.error, "warning": ctx.warning}
    for level, text, fields in done.verdict.lines:
        say.get(level, ctx.info)(text, host.name, **fields)
    return done.verdict.code
