"""What every headless command shares: config, the event bus, the recorder and the printer.

A command gets a Context, publishes events on its bus, and the printer and the recorder see the
same stream the TUI would.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO, TYPE_CHECKING, Any

from console.argtypes import Subcommands, add_subcommands, positive_int

# Every command module imports this one for its options, so `console CMD --help` loads it: what
# a Context runs on (the bus, the recorder, msgspec, the SSH transport) is imported where it is
# used, not here.
if TYPE_CHECKING:
    from collections.abc import Callable

    from console.sessions.live import LiveSession
    from console.sessions.recorder import Recorder
    from remote.link.hosts import Config, HostConfig
    from remote.link.transport import Transport
    from remote.spine.bus import EventBus


def add_verbs(parser: argparse.ArgumentParser, *, description: str, dest: str,
              metavar: str = "SUBCOMMAND") -> Subcommands:
    """A command made of verbs (`console NAME VERB ...`, one required): the action its verbs'
    parsers are added to."""
    parser.description = description
    return add_subcommands(parser, dest=dest, metavar=metavar, required=True)


def add_host_options(parser: argparse.ArgumentParser, *, fleet: bool = False) -> None:
    """--host and --accept-new-host-key: every command that reaches a box takes both. With
    `fleet`, --host also takes a,b,c or a [groups] name (console/fleet.py)."""
    more = "; or several: a,b,c or a group from [groups]" if fleet else ""
    parser.add_argument("--host", default="local",
                        help=f"host name from console.toml, or 'local' (default){more}")
    parser.add_argument("--accept-new-host-key", action="store_true",
                        help="trust and store the host key of a host not yet in known_hosts")


def add_point_size_options(parser: argparse.ArgumentParser, *, when: str = "") -> None:
    """--requests and --rounds: how many requests each point of a bench sweep sends, for
    `console bench run` and for `console run --serve`, which benches the served head the same
    way (`when` starts their help: "with --serve: ")."""
    parser.add_argument("--requests", type=positive_int, metavar="N",
                        help=f"{when}at least N requests per point, and never fewer than its "
                        "concurrency (default: remote/bench/results.py MIN_REQUESTS, stated when "
                        "the sweep starts; a p99 over n < 100 requests lies between the highest "
                        "samples)")
    parser.add_argument("--rounds", type=positive_int,
                        help=f"{when}exactly rounds x concurrency requests per point instead of "
                        "--requests")


def add_common_options(parser: argparse.ArgumentParser, *, record: bool = True,
                       func: Callable[..., Any] | None = None) -> None:
    """The options every command has; `func`: the command's own function, run with the args."""
    if func is not None:
        parser.set_defaults(func=func)
    parser.add_argument(
        "--config", metavar="PATH", help="console.toml to use (default: ./console.toml, then the user config dir)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON event per line instead of human lines")
    if record:
        parser.add_argument("--session", metavar="PATH", help="record the session to PATH (.jsonl or .jsonl.zst)")
        parser.add_argument("--no-record", action="store_true", help="do not record a session file")
        parser.add_argument("--no-redact", action="store_true",
                            help="keep secrets (tokens, Bearer, URL passwords) in what is "
                            "recorded and shown")


class Context:
    # A plain class, not a dataclass: importing dataclasses (and inspect with it) costs more than
    # the rest of `console CMD --help`, which imports this module for its options.
    def __init__(self, args: argparse.Namespace, config: Config, session: LiveSession) -> None:
        self.args = args
        self.config = config
        self.session = session
        self.bus: EventBus = session.bus
        self.recorder: Recorder | None = session.recorder
        self.out: IO[str] = sys.stdout
        self.transports: dict[str, Transport] = {}

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, hosts: list[str] | None = None,
                  show_stats: bool = False, config: Config | None = None) -> Context:
        from console.printer import Printer
        from console.sessions.live import open_session
        from remote.link.hosts import load_config

        if config is None:
            config = load_config(getattr(args, "config", None))
        # A command that fails on its configuration records nothing: the hosts it names are
        # resolved before the session file exists (`console stats --host nosuch` left one).
        for name in hosts or []:
            config.host(name)
        session = open_session(
            hosts or [],
            record=hasattr(args, "no_record") and not args.no_record,
            redact=not getattr(args, "no_redact", False),
            path=getattr(args, "session", None),
            printer=Printer(as_json=getattr(args, "json", False), show_stats=show_stats),
        )
        return cls(args, config, session)

    async def reach(self, name: str) -> tuple[HostConfig, Transport]:
        """The host's config and its one transport, connected: what a command on one host needs."""
        host = self.config.host(name)
        return host, await self.transport(host.name)

    async def transport(self, name: str) -> Transport:
        """One transport (one SSH connection) per host for the whole command."""
        if name not in self.transports:
            from remote.link.connect import make_transport

            t = make_transport(self.config.host(name), bus=self.bus, **self.ssh_kwargs())
            await t.connect()
            self.transports[name] = t
        return self.transports[name]

    def ssh_kwargs(self) -> dict[str, object]:
        # Read without a default: a command that reaches a box without add_host_options is a
        # bug to see at once (it was `console probe --accept-new-host-key`, exit 2), not False.
        if self.args.accept_new_host_key:
            return {"accept_new_host_key": True}
        return {}

    def show(self, text: str) -> None:
        """A table or a summary for the operator, unless --json: the events carry it there."""
        if not self.args.json:
            print(text, file=self.out, flush=True)

    def info(self, message: str, host: str = "", **extra: object) -> None:
        from remote.spine import events as ev
        self.bus.emit(ev.CONSOLE_INFO, host, message=message, **extra)

    def warning(self, message: str, host: str = "", **extra: object) -> None:
        from remote.spine import events as ev
        self.bus.emit(ev.CONSOLE_WARNING, host, message=message, **extra)

    def error(self, message: str, host: str = "", **extra: object) -> None:
        from remote.spine import events as ev
        self.bus.emit(ev.CONSOLE_ERROR, host, message=message, **extra)

    async def __aenter__(self) -> Context:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()  # a UsageError on its way out discards the session (aclose)

    async def aclose(self, *, discard: bool = False) -> None:
        for t in self.transports.values():
            try:
                await t.close()
            except Exception:  # closing is best effort; the error that brought us here matters
                pass
        self.transports.clear()
        # Called from the commands' `finally`: the exception on its way out, if any, is the one
        # being handled here. A usage or config error found after the session opened (a
        # missing pipeline file) discards the session, as `discard` does: nothing was done.
        from remote.errors import UsageError

        discard = discard or isinstance(sys.exc_info()[1], UsageError)
        self.session.close(discard=discard)
