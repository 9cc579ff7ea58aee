"""`console probe NAME --host a,b,c` (or a group): every box at once, one table.

Each host's probe runs on its own connection and publishes its own probe.result events (so
`--json` and the session carry every host); the table is built from those events (its columns:
the probe's row in remote/probe_table.py), and a cell that differs from the other hosts is
marked, so the one box on another vLLM (or unpatched, or with another GPU count) is named at a
glance. The one-host route (run_one) is here too, so that `console probe` on one host and on
several run the same code without the two modules importing each other.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

from console.context import Context
from console.fleet import open_fleet, run_each, summary, table
from remote import probe_table
from remote.errors import RemoteError
from remote.probe_table import ProbeRequest


def patch_state(plans: list[Any]) -> str:
    """One word for a host's speculators worker: patched, unpatched, refused, or clean (no
    recipe applies to this version)."""
    if any(p.refused for p in plans):
        return "refused"
    if any(p.changes for p in plans):
        return "unpatched"
    if any(p.in_effect for p in plans):
        return "patched"
    return "clean"


async def _patch_state(ctx: Context, name: str) -> str:
    from remote.ops import patch as ops

    host, transport = await ctx.reach(name)
    try:
        return patch_state(await ops.patcher(transport, host, ctx.bus).plan(emit=False))
    except RemoteError as exc:  # no recipe's file there, say: a state, not a failed host
        why = str(exc)
        return "n/a" + (f" ({why[why.rfind('('):].strip('()')})" if why.endswith(")") else "")


async def run_fleet(args: argparse.Namespace) -> int:
    from remote.spine import events as ev

    row = probe_table.get(args.probe)
    if row.fleet_row is None:
        from remote.errors import UsageError

        raise UsageError(f"probe {row.name} reads one host at a time: give one --host")
    ctx, resolved = open_fleet(args)
    async with ctx:
        got: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))

        def keep(e: Any) -> None:
            if e.kind == ev.PROBE_RESULT:
                got[e.host][e.payload.get("probe", "")].append(e.payload.get("result") or {})

        remove = ctx.bus.add_callback(keep)
        patch: dict[str, str] = {}

        async def one(name: str) -> int:
            code = await run_one(ctx, args, name)
            if row.fleet_patch:
                patch[name] = await _patch_state(ctx, name)
            return code

        try:
            codes = await run_each(ctx, resolved, one)
        finally:
            remove()
        rows: list[list[str]] = []
        for name in resolved.names:
            if codes.get(name) not in (0, 1, 4) or name not in got:
                continue  # unreachable: its error line says so; no row to compare
            rows += [[name, *row.fleet_row(r), *([patch.get(name, "-")] if row.fleet_patch else [])]
                     for r in got[name][row.name]]
        header = ("HOST", *row.fleet_header, *(["PATCH"] if row.fleet_patch else []))
        if rows:
            ctx.show(table(header, rows))
        return summary(ctx, codes, f"probe {args.probe}")


async def run_one(ctx: Context, args: argparse.Namespace, name: str) -> int:
    """The probe on one host (alone, or one of a fleet): its exit code, having said what its
    results mean (the results themselves are probe.result events)."""
    from remote.ops import probes as ops

    host, transport = await ctx.reach(name)
    if probe_table.get(args.probe).serving_python:
        from remote.ops import serve

        host = await serve.probe_python(transport, host)
    done = await ops.run(transport, host, ctx.bus, args.probe, request(args),
                         timeout=args.timeout)
    say = {"error": ctx.error, "warning": ctx.warning}
    for level, text, fields in done.verdict.lines:
        say.get(level, ctx.info)(text, host.name, **fields)
    return done.verdict.code


def request(args: argparse.Namespace) -> ProbeRequest:
    """The operator's options as the probes' rows read them (head: --target is the model)."""
    return ProbeRequest(model=args.target or args.model, arch=args.arch, family=args.family,
                        vllm_root=args.vllm_root, all=args.all, head=args.head_dir)
