"""`console jobs`: detached runs on a box — list, launch, status, tail (resumable), cancel.

A run lives on the box (remote/jobs/client.py); this command only looks at it. Tailing records the
session and keeps a cursor per run on this machine, so a console that died (or a new terminal)
resumes the tail exactly where the recorded lines stop.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import aclosing
from typing import TYPE_CHECKING

from console.argtypes import add_subcommands, nonneg_float
from console.context import Context
from remote.errors import EXIT_FAILED, EXIT_OK, UsageError

# The jobs client (asyncio, the SSH transport, msgspec events) is imported where a subcommand
# runs: `console jobs --help` loads none of it.
if TYPE_CHECKING:
    from remote.jobs.client import Jobs
    from remote.jobs.records import RunInfo

_S = argparse.SUPPRESS


def _options(p: argparse.ArgumentParser, *, leaf: bool) -> None:
    """Shared options, accepted before or after the subcommand (leaf defaults do not override)."""
    d = (lambda v: _S) if leaf else (lambda v: v)
    p.add_argument("--host", default=d("local"),
                   help="host name from console.toml, or 'local'; list: also a,b,c or a group")
    p.add_argument("--accept-new-host-key", action="store_true", default=d(False),
                   help="trust and store the host key of a host not yet in known_hosts")
    p.add_argument("--config", metavar="PATH", default=d(None), help="console.toml to use")
    p.add_argument("--json", action="store_true", default=d(False),
                   help="print JSON instead of human lines")
    p.add_argument("--session", metavar="PATH", default=d(None),
                   help="record the session to PATH (launch and tail record by default)")
    p.add_argument("--no-record", action="store_true", default=d(False),
                   help="do not record a session file")
    p.add_argument("--no-redact", action="store_true", default=d(False),
                   help="keep secrets (tokens, Bearer, URL passwords) in what is recorded and shown")


HELP = "list, launch, tail and cancel detached runs on a host"


def register(p: argparse.ArgumentParser) -> None:
    p.description = ("Detached runs on a host. With no subcommand, lists them.")
    _options(p, leaf=False)
    p.set_defaults(func=run, jobs_command="list")
    jsub = add_subcommands(p, dest="jobs_command", metavar="SUBCOMMAND")

    ls = jsub.add_parser("list", help="list runs (the default)")
    _options(ls, leaf=True)

    la = jsub.add_parser("launch", help="start a detached run and follow its log",
                         description="Start ARGV detached on the host (it survives this console "
                         "and the connection) and follow its log until it ends.")
    _options(la, leaf=True)
    la.add_argument("--name", required=True, help="run name; a second run of a running name is refused")
    la.add_argument("--cwd", help="working directory on the box")
    la.add_argument("--env", action="append", default=[], metavar="K=V",
                    help="environment variable for the run (repeatable)")
    la.add_argument("--detach", action="store_true", help="print the run id and return at once")
    la.add_argument("argv", nargs=argparse.REMAINDER, help="-- command and arguments")

    st = jsub.add_parser("status", help="show one run")
    _options(st, leaf=True)
    st.add_argument("run_id")

    ta = jsub.add_parser("tail", help="follow a run's log, resuming where this machine left off")
    _options(ta, leaf=True)
    ta.add_argument("run_id")
    ta.add_argument("--from-start", action="store_true", help="ignore the saved cursor")
    ta.add_argument("--no-follow", action="store_true", help="print what is there and stop")

    ca = jsub.add_parser("cancel", help="stop a run: TERM its process group, KILL after a grace")
    _options(ca, leaf=True)
    ca.add_argument("run_id")
    ca.add_argument("--grace", type=nonneg_float, default=10.0, help="seconds between TERM and KILL")


async def run(args: argparse.Namespace) -> int:
    from remote.jobs.client import Jobs
    from remote.jobs.cursors import CursorStore

    command = args.jobs_command or "list"
    if command not in ("launch", "tail"):
        args.no_record = True  # a listing is not a session worth keeping
    from console.fleet import names_several

    if names_several(args):
        if command != "list":
            raise UsageError(f"jobs {command} acts on one run on one host: give one --host")
        return await _list_fleet(args)
    async with Context.from_args(args, hosts=[args.host]) as ctx:
        host, transport = await ctx.reach(args.host)
        session = ctx.recorder.writer.path if ctx.recorder is not None else None
        jobs = Jobs(transport, host.workdir, host=host.name, bus=ctx.bus, python=host.python,
                    cursors=CursorStore(session=session, after_recorded=(
                        ctx.recorder.after_written if ctx.recorder is not None else None)))
        if command == "list":
            return _print_runs(ctx, await jobs.list(), args.json)
        if command == "status":
            return _print_runs(ctx, [await jobs.status(args.run_id)], args.json)
        if command == "cancel":
            info = await jobs.cancel(args.run_id, grace=args.grace)
            return EXIT_OK if info.done else EXIT_FAILED
        if command == "launch":
            argv = list(args.argv)
            if argv and argv[0] == "--":
                argv = argv[1:]
            if not argv:
                raise UsageError("console jobs launch: give the command after --")
            env = {}
            for item in args.env:
                key, sep, value = item.partition("=")
                if not sep:
                    raise UsageError(f"--env {item!r}: expected K=V")
                env[key] = value
            info = await jobs.launch(argv, name=args.name, env=env, cwd=args.cwd)
            if args.detach:
                print(info.run_id)
                return EXIT_OK
            return await _follow(ctx, jobs, info.run_id, 0)
        if command == "tail":
            start = 0 if args.from_start else jobs.cursors.load(host.name, args.run_id) \
                if jobs.cursors else 0
            if start:
                ctx.info(f"resuming {args.run_id} at byte {start}", host.name)
            return await _follow(ctx, jobs, args.run_id, start, follow=not args.no_follow)
        raise UsageError(f"unknown jobs subcommand {command!r}")


async def _follow(ctx: Context, jobs: Jobs, run_id: str, offset: int, *,
                  follow: bool = True) -> int:
    import asyncio

    try:
        async with aclosing(jobs.tail(run_id, offset=offset, follow=follow)) as lines:
            async for _ in lines:
                pass  # job.line events reach the printer and the recorder through the bus
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels us, then raises KeyboardInterrupt
        print(f"detached; the run goes on. Reattach: console jobs tail --host {jobs.host} {run_id}",
              file=sys.stderr)
        raise
    if not follow:
        return EXIT_OK
    info = await jobs.wait(run_id)
    return EXIT_OK if info.state == "exited" and info.returncode == 0 else EXIT_FAILED


async def _list_fleet(args: argparse.Namespace) -> int:
    """Every host's runs in one table, a HOST column first; a host that cannot be reached is
    one error line and its exit code, the others still listed."""
    from console.fleet import open_fleet, run_each, summary
    from remote.jobs.client import Jobs
    from remote.spine import events as ev

    ctx, resolved = open_fleet(args)
    async with ctx:
        found: dict[str, list[RunInfo]] = {}

        async def one(name: str) -> int:
            host, transport = await ctx.reach(name)
            found[name] = await Jobs(transport, host.workdir, host=name, bus=ctx.bus,
                                     python=host.python).list()
            if args.json:
                for info in found[name]:
                    ctx.bus.emit(ev.JOB_STATUS, name, **info.to_dict())
            return EXIT_OK

        codes = await run_each(ctx, resolved, one)
        if not args.json:
            rows = [(h, *_row(r, ctx)) for h in resolved.names for r in found.get(h, [])]
            _print_rows(("HOST", *_HEADER), rows, ctx)
        return summary(ctx, codes, "jobs list")


_HEADER = ("RUN", "NAME", "STATE", "RC", "PID", "STARTED", "LOG BYTES")


def _row(r: RunInfo, ctx: Context) -> tuple[str, ...]:
    from remote.spine.sanitize import visible  # a run's name and id come from the box

    # A run an older console named after a secret: shown masked, as the bus masks its events.
    shown = ctx.bus.redactor.text if ctx.bus.redactor is not None else str
    return (visible(shown(r.run_id)), visible(shown(r.name)), r.state,
            "-" if r.returncode is None else str(r.returncode),
            "-" if r.pid is None else str(r.pid), r.started, str(r.log_size))


def _print_rows(header: tuple[str, ...], rows: list[tuple[str, ...]], ctx: Context) -> None:
    if not rows:
        print("no runs", file=ctx.out)
        return
    from console.fleet import aligned

    print(aligned([header, *rows]), file=ctx.out)


def _print_runs(ctx: Context, runs: list[RunInfo], as_json: bool) -> int:
    from remote.spine import events as ev
    if as_json:  # one JSON event per line, like every other --json output
        for info in runs:
            ctx.bus.emit(ev.JOB_STATUS, ctx.args.host, **info.to_dict())
        return EXIT_OK
    _print_rows(_HEADER, [_row(r, ctx) for r in runs], ctx)
    return EXIT_OK
