"""`console`: the TUI with no subcommand; headless subcommands otherwise.

Exit codes (also in README): 0 ok, 1 a stage/probe/bench failed, 2 usage or config error,
3 connection/auth/host-key error, 4 compat/patch refused, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence

from console import __version__
from remote.errors import EXIT_INTERRUPTED, EXIT_USAGE, ConsoleError

# Each module registers its own subparser; order is the order shown in --help.
COMMAND_MODULES = (
    "console.commands.run",
    "console.commands.replay",
    "console.commands.hosts",
    "console.commands.jobs",
    "console.commands.patch",
    "console.commands.bench",
    "console.commands.probe",
    "console.commands.stats",
    "console.commands.allreduce",
)

EPILOG = """exit codes: 0 ok, 1 a stage/probe/bench failed, 2 usage or config error,
3 connection/auth/host-key error, 4 compat/patch refused, 130 interrupted"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="console",
        description="Operator console for EAGLE-3 speculative decoding on a remote vLLM box. "
        "With no command, opens the TUI.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"console {__version__}")
    parser.add_argument("--config", metavar="PATH", help="console.toml to use (TUI)")
    parser.add_argument("--session", metavar="PATH",
                        help="record the TUI session to PATH (default: the sessions directory)")
    parser.add_argument("--no-record", action="store_true", help="do not record the TUI session")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or usage error (2)
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if args.command is None:
            from console.tui.app import run_app

            return asyncio.run(run_app(args))
        return int(asyncio.run(args.func(args)))
    except ConsoleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
