"""`console patch plan|apply|verify|rollback --host H`: fix the speculators worker in place.

`plan` shows the diff and which recipes apply and why; `apply` asks before writing unless --yes
(or --json, where nobody can answer); refusals exit 4.
"""

from __future__ import annotations

import argparse
import sys

from console.context import Context, add_common_options, add_host_options
from remote.errors import EXIT_OK, EXIT_REFUSED, Refused, RemoteError, UsageError
from remote.spine.sanitize import visible_lines

# The patcher (the SSH transport, msgspec events) is imported where it runs, in _run;
# `console patch --help` loads only the recipe list it names.

ACTIONS = ("plan", "apply", "verify", "rollback")


HELP = "plan, apply, verify or roll back fixes to the speculators worker"


def register(p: argparse.ArgumentParser) -> None:
    # register runs only for a `console patch` command line (console/cli.py: `console --help`
    # reads HELP alone), so only that line loads the recipes (and dataclasses with them).
    from remote.patcher.recipes import RECIPES

    names = ", ".join(r.name for r in RECIPES)
    p.description = ("Fix speculators' hidden-state worker inside the deployed container, "
                     f"atomically and reversibly. Recipes: {names}.")
    p.add_argument("action", choices=ACTIONS)
    add_host_options(p, fleet=True)
    p.add_argument("--recipe", action="append", metavar="NAME",
                   help="only this recipe (repeatable; default: every recipe that applies)")
    p.add_argument("--force", action="store_true",
                   help="apply: to a file that is not a known original when the anchors match;"
                   " rollback: also a file edited after apply, keeping the edit as"
                   " <file>.eagle3-edited-<sha256> beside it")
    p.add_argument("--yes", action="store_true", help="apply without asking")
    p.add_argument("--site-packages", metavar="DIR",
                   help="look for the package in DIR instead of the box python's import path")
    add_common_options(p, func=run)


async def run(args: argparse.Namespace) -> int:
    from console.fleet import names_several

    if names_several(args):
        from console.commands.patch_fleet import run_fleet

        return await run_fleet(args)
    ctx = Context.from_args(args, hosts=[args.host])
    bad_input = False
    try:
        return await _run(ctx, args)
    except RemoteError as exc:
        # As an event, so the refusal or failure is in the session file and the --json stream;
        # bad input (an unknown recipe) did nothing, and its session is discarded.
        ctx.error(str(exc), args.host, exit_code=exc.exit_code)
        bad_input = isinstance(exc, UsageError)
        return exc.exit_code
    finally:
        await ctx.aclose(discard=bad_input)


async def _run(ctx: Context, args: argparse.Namespace) -> int:
    from remote.ops import patch as ops

    host, transport = await ctx.reach(args.host)
    patcher = ops.patcher(transport, host, ctx.bus, site_packages=args.site_packages,
                          recipes=args.recipe)
    if args.action == "plan":
        plans = await ops.plan(patcher, force=args.force)
        if not args.json:
            for p in plans:
                if p.changes:
                    ctx.out.write(visible_lines(p.diff))
        return EXIT_REFUSED if ops.refused(plans) else EXIT_OK
    if args.action == "verify":
        plans = await ops.verify(patcher)
        if patcher.drift:  # the container was recreated: the patch is gone
            return EXIT_REFUSED
        return EXIT_OK if all(p.in_effect is not None for p in plans) else EXIT_REFUSED
    if args.action == "rollback":
        await ops.rollback(patcher, force=args.force)
        return EXIT_OK
    if args.yes:
        await ops.apply(patcher, force=args.force)
        return EXIT_OK
    plans = await ops.plan(patcher, force=args.force)
    why = ops.refused(plans)
    if why:
        raise Refused(why)
    if any(p.changes for p in plans):
        if args.json or not sys.stdin.isatty():
            raise UsageError("apply changes files on the box: pass --yes to confirm "
                             "(no terminal to ask on)")
        for p in plans:
            if p.changes:
                print(visible_lines(p.diff), file=sys.stderr)
        answer = input(f"apply to {host.name}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            ctx.info("not applied", host.name)
            return EXIT_REFUSED
    # the same check as the TUI's: refused if the plan changed since it was shown
    await ops.apply(patcher, shown=plans, force=args.force)
    return EXIT_OK
