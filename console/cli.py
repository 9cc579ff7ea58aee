"""`console`: the TUI with no subcommand; headless subcommands otherwise. Exit codes: EPILOG
(the help says them; the README too)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Coroutine, Sequence
from contextlib import suppress
from types import ModuleType
from typing import Any

from console import __version__
from console.argtypes import Subcommands, add_subcommands, tcp_port
from console.commands import (
    allreduce,
    bench,
    hosts,
    init,
    jobs,
    patch,
    probe,
    replay,
    report,
    run,
    serve,
    stats,
)
from remote.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, RemoteError, UsageError
from remote.spine.sanitize import visible

# The commands, in the order the top-level help lists them: a command is named as its module
# (console/commands/), whose HELP is the line that help shows and whose `register(parser)`
# declares the command's own arguments on the parser made here and sets the `func` that runs it.
COMMANDS = (run, replay, report, hosts, init, jobs, patch, bench, serve, probe, stats, allreduce)


def command_name(module: ModuleType) -> str:
    return module.__name__.rpartition(".")[2]


EPILOG = """exit codes: 0 ok, 1 a stage/probe/bench failed, 2 usage or config error,
3 connection/auth/host-key error, 4 compat/patch refused, 130 interrupted"""


def build_parser(commands: Sequence[ModuleType] = COMMANDS) -> argparse.ArgumentParser:
    """The parser with the full parsers of `commands` (all of them by default: the tests walk
    every one)."""
    parser, sub = _top_level()
    for module in commands:
        module.register(sub.add_parser(command_name(module), help=module.HELP))
    return parser


def parse_command_line(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """What `build_parser().parse_args(argv)` gives, for a fraction of its cost.

    Building every command's parser costs about as much as starting Python (each add_argument
    makes a help formatter), while `console --help` needs only each command's name and HELP
    and `console CMD ...` only CMD's parser. So a first pass over an outline (the top level,
    and for each command an empty parser that takes whatever follows it) finds the command,
    and the second parses the line with the top level and that one command's full parser: its
    help, its errors and its values are the full parser's. With no command (the TUI), the
    outline parses. Public argparse only: nothing is patched or subclassed.
    """
    outline, sub = _top_level()
    for module in COMMANDS:
        sub.add_parser(command_name(module), help=module.HELP, add_help=False)
    found, _ = outline.parse_known_args(argv)
    if found.command is None:
        return outline.parse_args(argv)
    chosen = [m for m in COMMANDS if command_name(m) == found.command]
    return build_parser(chosen).parse_args(argv)


def _top_level() -> tuple[argparse.ArgumentParser, Subcommands]:
    parser = argparse.ArgumentParser(
        prog="console",
        description="Operator console for EAGLE-3 speculative decoding on a remote vLLM box. "
        "With no command, opens the TUI.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"console {__version__}")
    parser.add_argument("--config", dest="top_config", metavar="PATH",
                        help="console.toml to use (the TUI, or the command after it)")
    parser.add_argument("--host", dest="tui_host", metavar="HOSTS",
                        help="TUI: only these hosts (NAME, NAME,NAME,... or a group from "
                        "console.toml), all connected at start; several open on the Fleet screen")
    parser.add_argument("--accept-new-host-key", action="store_true", dest="tui_accept_new_host_key",
                        help="TUI with --host: trust and store a host's key the first time it "
                        "is seen (a changed key is still refused)")
    parser.add_argument("--session", dest="top_session", metavar="PATH",
                        help="record the TUI session (or the command's) to PATH (default: the "
                        "sessions directory)")
    parser.add_argument("--no-record", dest="top_no_record", action="store_true",
                        help="do not record the TUI session (or the command's)")
    parser.add_argument("--no-redact", dest="top_no_redact", action="store_true",
                        help="keep secrets (tokens, Bearer, URL passwords) in the TUI session "
                        "(or the command's)")
    parser.add_argument("--prometheus", dest="tui_prometheus", type=tcp_port, metavar="PORT",
                        help="TUI: also serve the live samples as Prometheus text at "
                        "http://127.0.0.1:PORT/metrics (as `console stats --prometheus`)")
    return parser, add_subcommands(parser, dest="command", metavar="COMMAND")


# The options given before COMMAND that the command takes too: (top-level dest, the command's
# dest, the flag). Kept under their own dests, because a subcommand's parser writes its own
# defaults over the namespace and `console --config X hosts` silently ran on the default
# config (issue 48 row 5).
TOP_LEVEL = (("top_config", "config", "--config"), ("top_session", "session", "--session"),
             ("top_no_record", "no_record", "--no-record"),
             ("top_no_redact", "no_redact", "--no-redact"))


def apply_top_level(args: argparse.Namespace) -> argparse.Namespace:
    """The options given before COMMAND, moved to the command's own dests (or the TUI's, with
    no command). One the command does not take, or given both before and after it with
    different values, is a UsageError: never silently ignored."""
    command = getattr(args, "command", None)
    for top, name, flag in TOP_LEVEL:
        value = getattr(args, top, None)
        if hasattr(args, top):
            delattr(args, top)
        if command is None:
            setattr(args, name, value)
            continue
        if value in (None, False):
            continue
        if not hasattr(args, name):
            if flag == "--no-record":
                continue  # asking a command that records nothing not to record: nothing to do
            raise UsageError(f"{flag} before {command}: console {command} takes no {flag}")
        given = getattr(args, name)
        if given not in (None, False) and given != value:
            raise UsageError(f"{flag} given before and after {command} with different values "
                             f"({value!r}, {given!r}): give it once")
        setattr(args, name, value)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_command_line(argv)
    except SystemExit as exc:  # argparse: --help (0) or usage error (2)
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        args = apply_top_level(args)
        if args.command is None:
            import asyncio

            from console.tui.launch import run_app

            return asyncio.run(run_app(args))
        if getattr(args, "tui_host", None):
            raise UsageError(f"--host before {args.command} is the TUI's: give it after "
                             f"the command (console {args.command} ... --host HOSTS)")
        return _finish(args.func(args))
    except RemoteError as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except BaseExceptionGroup as group:  # a TaskGroup's: the first operator-facing error wins
        first = _first_remote_error(group)
        if first is not None:
            print(f"error: {_one_line(str(first))}", file=sys.stderr)
            return first.exit_code
        return _internal_error(group)
    except Exception as exc:  # the last line of defence: never a traceback
        return _internal_error(exc)


def _finish(result: int | Coroutine[Any, Any, int]) -> int:
    """A command's exit code. Most commands are coroutines (they talk to hosts); one that
    needs no event loop (`replay --print`, a file to stdout) returns its code at once, and
    then asyncio, ssl and their like (a tenth of a second) are never imported: asyncio is
    imported here, when a coroutine needs it."""
    if isinstance(result, int):
        return result
    import asyncio

    return int(asyncio.run(result))


def _one_line(text: str) -> str:
    """An error may quote the box (its stderr): one line, its escapes drawn, not obeyed."""
    return visible(" ".join(text.split())) or "(no message)"


def _first_remote_error(group: BaseExceptionGroup) -> RemoteError | None:
    found: BaseException | None = group.subgroup(RemoteError)  # nesting and order kept
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    return found if isinstance(found, RemoteError) else None


def _internal_error(exc: BaseException) -> int:
    """A bug, not bad input: one line for the operator, the traceback kept in a file for the
    report (a traceback on the terminal would be the only thing they see otherwise)."""
    import tempfile
    import traceback

    where = ""
    with suppress(OSError), tempfile.NamedTemporaryFile("w", prefix="console-crash-",
                                                        suffix=".txt", delete=False) as fh:
        traceback.print_exception(exc, file=fh)
        where = f" (traceback in {fh.name})"
    print(f"error: internal error: {type(exc).__name__}: {_one_line(str(exc))}{where}",
          file=sys.stderr)
    return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
