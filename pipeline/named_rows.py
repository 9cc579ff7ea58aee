"""A row of a table by its name: the stage table here, the probe table and the TUI's screens
(remote/probe_table.py, console/tui/screens.py). One place says how an unknown name is refused:
naming the known ones, so a typo is fixed from the message alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


Row = TypeVar("Row", bound=Named)


def row_named(table: Sequence[Row], name: str, what: str,
              error: Callable[[str], Exception] = ValueError) -> Row:
    """The row of `table` called `name`; else `error("unknown <what> 'x' (<what>s: a, b)")`."""
    for row in table:
        if row.name == name:
            return row
    raise error(f"unknown {what} {name!r} ({what}s: {', '.join(r.name for r in table)})")
