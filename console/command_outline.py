"""Subcommand parsers built when their command is on the command line, not before.

Building argparse's parsers for every command costs about as much as starting Python (each
`add_argument` makes a help formatter, each parser looks up translations): `console --help`
needs only each command's name and help line, and `console CMD ...` only CMD's parser. The
declarations stay where they are, in each command module's `register(subparsers)`: it runs once
in outline mode, stopped at its `add_parser` call once the name and the help line are recorded
(so what a register does after that, such as loading data for a description, is not paid for
then), and runs again for real when argparse reaches the command. One top-level command per
register, as console/cli.py's COMMAND_MODULES has them. `console.cli.build_parser()` (no
`lazy`) still builds every parser, for the tests that walk them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

Register = Callable[[Any], None]


class _Outlined(BaseException):
    """Stops a register at its add_parser in outline mode (a BaseException, so that no
    `except Exception` in a register can swallow it)."""


class CommandsOnDemand(argparse._SubParsersAction):  # type: ignore[type-arg]
    """`parser.add_subparsers(action=CommandsOnDemand, ...)`, then `outline(register)` per
    command module."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._registers: dict[str, Register] = {}
        self._outlining: Register | None = None

    def outline(self, register: Register) -> None:
        self._outlining = register
        try:
            register(self)
        except _Outlined:
            pass
        finally:
            self._outlining = None

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        aliases = tuple(kwargs.get("aliases", ()))
        if self._outlining is not None:
            if name in self._name_parser_map:
                raise argparse.ArgumentError(self, f"conflicting subparser: {name}")
            if "help" in kwargs:  # the line `console --help` shows, as argparse would list it
                self._choices_actions.append(self._ChoicesPseudoAction(name, aliases, kwargs["help"]))
            for each in (name, *aliases):
                # A key with no parser yet: argparse only tests membership until it is called.
                self._name_parser_map[each] = None  # type: ignore[assignment]
                self._registers[each] = self._outlining
            raise _Outlined
        if self._name_parser_map.get(name, True) is None:
            # Building an outlined command: its help line is listed already.
            kwargs.pop("help", None)
            for each in (name, *aliases):
                del self._name_parser_map[each]
                self._registers.pop(each, None)
        return super().add_parser(name, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        register = self._registers.get(values[0])
        if register is not None:
            register(self)
        super().__call__(parser, namespace, values, option_string)
