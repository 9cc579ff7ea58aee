"""argparse types for numbers an operator types: refused at parse time (usage, exit 2) when
they are not finite or out of range, instead of reaching a remote helper as `nan` (which then
fails with an unrelated message) or an `int(nan)` deep in a timeout."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, Protocol


def _number(kind: type, low: float, *, strict: bool, what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


positive_float = _number(float, 0, strict=True, what="a positive number")
nonneg_float = _number(float, 0, strict=False, what="a number >= 0")
positive_int = _number(int, 0, strict=True, what="a positive integer")
nonneg_int = _number(int, 0, strict=False, what="an integer >= 0")


class Subcommands(Protocol):
    """What `ArgumentParser.add_subparsers()` returns, as a command with verbs uses it
    (console/context.py: add_verbs): the public face of argparse's action (its class is
    private)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...
