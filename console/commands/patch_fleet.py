"""`console patch plan|apply|verify|rollback --host a,b,c` (or a group): a result per host.

Apply across a fleet is all-or-nothing. Every host is planned first; if any host cannot be
reached or refuses its plan, nothing is written anywhere (a fleet where some boxes are patched
and others not serves with two different workers, which is the state the operator asked to
avoid). On each box the write itself is all-or-nothing (the helper's journal); if one box's
write still fails after the others succeeded, the boxes this command changed are rolled back,
and the summary says what happened where.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from console.context import Context
from console.fleet import open_fleet, run_each, summary, table, worst
from remote.errors import EXIT_OK, EXIT_REFUSED, RemoteError, UsageError
from remote.spine.sanitize import visible_lines

if TYPE_CHECKING:
    from remote.patcher.plan import FilePlan


def _word(plans: list[FilePlan]) -> str:
    if any(p.refused for p in plans):
        return "refused: " + "; ".join(p.refused or "" for p in plans if p.refused)
    applying = sorted({d.name for p in plans for d in p.decisions if d.applies})
    return f"would apply {', '.join(applying)}" if applying else "nothing to do"


async def run_fleet(args: argparse.Namespace) -> int:
    from remote.ops import patch as ops

    ctx, resolved = open_fleet(args)
    async with ctx:
        results: dict[str, str] = {}
        plans: dict[str, list[FilePlan]] = {}

        async def patcher(name: str) -> Any:
            host, transport = await ctx.reach(name)
            return ops.patcher(transport, host, ctx.bus, site_packages=args.site_packages,
                               recipes=args.recipe)

        async def plan_one(name: str) -> int:
            p = plans[name] = await ops.plan(await patcher(name), force=args.force)
            results[name] = _word(p)
            return EXIT_REFUSED if ops.refused(p) else EXIT_OK

        async def verify_one(name: str) -> int:
            p = await ops.verify(await patcher(name))
            ok = all(x.in_effect is not None for x in p)
            active = sorted({r for x in p for r in (x.in_effect or ())})
            results[name] = (f"in effect: {', '.join(active) or 'none'}" if ok
                             else "not a state the recipes produce")
            return EXIT_OK if ok else EXIT_REFUSED

        async def rollback_one(name: str) -> int:
            await ops.rollback(await patcher(name), force=args.force)
            results[name] = "rolled back"
            return EXIT_OK

        if args.action == "verify":
            codes = await run_each(ctx, resolved, verify_one)
        elif args.action == "rollback":
            codes = await run_each(ctx, resolved, rollback_one)
        else:
            codes = await run_each(ctx, resolved, plan_one)
            if args.action == "plan" and not args.json:
                _print_diffs(ctx, plans)
            if args.action == "apply":
                codes = await _apply(ctx, args, resolved.names, codes, plans, results, patcher)
        ctx.show(table(("HOST", f"PATCH {args.action.upper()}"),
                       [[h, results.get(h, "failed (see above)")] for h in codes]))
        return summary(ctx, codes, f"patch {args.action}")


def _print_diffs(ctx: Context, plans: dict[str, list[FilePlan]]) -> None:
    for name, ps in sorted(plans.items()):
        for p in ps:
            if p.changes:
                ctx.out.write(f"== {name} ==\n{visible_lines(p.diff)}")


async def _apply(ctx: Context, args: argparse.Namespace, names: list[str], codes: dict[str, int],
                 plans: dict[str, list[FilePlan]], results: dict[str, str], patcher: Any
                 ) -> dict[str, int]:
    from remote.ops import patch as ops

    blocked = [h for h, c in codes.items() if c != EXIT_OK]
    if blocked:
        for h in names:
            if h not in blocked:
                results[h] = "not applied (another host failed its plan)"
        ctx.error(f"nothing applied on any host: {', '.join(blocked)} cannot be patched as "
                  "planned", exit_code=worst([codes[h] for h in blocked]))
        return codes
    changing = [h for h in names if any(p.changes for p in plans[h])]
    if changing and not args.yes:
        if args.json or not sys.stdin.isatty():
            raise UsageError("apply changes files on the boxes: pass --yes to confirm "
                             "(no terminal to ask on)")
        _print_diffs(ctx, plans)
        if input(f"apply to {', '.join(changing)}? [y/N] ").strip().lower() not in ("y", "yes"):
            for h in names:
                results[h] = "not applied (declined)"
            return {h: EXIT_REFUSED for h in names}
    applied: list[str] = []

    async def apply_one(name: str) -> int:
        await ops.apply(await patcher(name), shown=plans[name], force=args.force)
        if name in changing:
            applied.append(name)
        results[name] = "applied" if name in changing else "already as planned"
        return EXIT_OK

    from remote.link.groups import Resolved

    codes = await run_each(ctx, Resolved(names=list(names)), apply_one)
    failed = [h for h, c in codes.items() if c != EXIT_OK]
    if failed and applied:
        ctx.warning(f"{', '.join(failed)} failed to apply: rolling back {', '.join(applied)}")
        for name in applied:
            try:
                await ops.rollback(await patcher(name))
                results[name] = f"rolled back ({', '.join(failed)} failed)"
            except RemoteError as exc:
                ctx.error(f"rollback after a failed fleet apply: {exc}", name,
                          exit_code=exc.exit_code)
                results[name] = "APPLIED, rollback failed: roll back by hand"
                codes[name] = exc.exit_code
    for h in failed:
        results[h] = "failed (nothing written there)"
    return codes
