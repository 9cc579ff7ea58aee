"""`console run --host H`: the headless session against one host.

Until the pipeline lands, this connects, runs a short environment check on the box with the
host's python, and records the session. It says so in its output rather than pretending.
"""

from __future__ import annotations

import argparse
import json

from console.context import Context, add_common_options
from remote import events as ev
from remote.errors import EXIT_FAILED, EXIT_OK

_CHECK = (
    "import json, platform, sys, os, shutil;"
    "print(json.dumps({'python': sys.version.split()[0], 'executable': sys.executable,"
    " 'platform': platform.platform(), 'hostname': platform.node(), 'cpus': os.cpu_count()}))"
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="run the headless session against a host",
                       description="Run the headless session against a host and record it.")
    p.add_argument("--host", default="local", help="host name from console.toml, or 'local' (default)")
    p.add_argument("--accept-new-host-key", action="store_true",
                   help="trust and store the host key of a host not yet in known_hosts")
    add_common_options(p)
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    ctx = Context.from_args(args, hosts=[args.host])
    try:
        host = ctx.host(args.host)
        t = await ctx.transport(host.name)
        ctx.bus.emit(ev.CONNECTION_UP, host.name, summary=f"connected to {host.name}")
        ctx.info("the EAGLE-3 pipeline is not wired into `console run` yet: "
                 "running an environment check only", host.name)
        done = await t.run([host.python, "-c", _CHECK], timeout=60)
        if done.returncode != 0:
            ctx.error(f"environment check failed (exit {done.returncode}): {done.stderr.strip()}",
                      host.name)
            return EXIT_FAILED
        try:
            info = json.loads(done.stdout)
        except ValueError:
            ctx.error(f"environment check printed no JSON: {done.stdout[:200]!r}", host.name)
            return EXIT_FAILED
        ctx.bus.emit(ev.PROBE_RESULT, host.name, probe="check", result=info,
                     summary=f"python {info['python']} on {info['hostname']} ({info['cpus']} CPUs)")
        return EXIT_OK
    finally:
        await ctx.aclose()
