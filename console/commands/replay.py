"""`console replay FILE`: the TUI fed from a session file, or --print for plain lines."""

from __future__ import annotations

import argparse
import sys

from console.printer import Printer
from console.session import SessionReader
from remote.errors import EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("replay", help="replay a recorded session (TUI, or --print)",
                       description="Replay a recorded session file in the TUI, or print it.")
    p.add_argument("file", help="session file (.jsonl or .jsonl.zst)")
    p.add_argument("--print", dest="print_", action="store_true", help="print events and exit (no TUI)")
    p.add_argument("--json", action="store_true", help="with --print: one JSON event per line")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    reader = SessionReader(args.file)
    try:
        if not args.print_:
            from console.tui.app import run_replay_app

            return await run_replay_app(reader)
        printer = Printer(as_json=args.json)
        h = reader.header
        if not args.json:
            print(f"# session started {h.started:%Y-%m-%d %H:%M:%S} UTC, hosts: "
                  f"{', '.join(h.hosts) or '-'}, {len(reader)} events")
        for event in reader.events():
            printer(event)
        for warning in reader.warnings:
            print(f"warning: {args.file}: {warning}", file=sys.stderr)
        return EXIT_OK
    finally:
        reader.close()
