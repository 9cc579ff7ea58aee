"""The base of every event schema (remote/spine/event_types.py has the table of kinds)."""

from __future__ import annotations

from typing import ClassVar

import msgspec

Num = int | float


class Payload(msgspec.Struct, kw_only=True, frozen=True):
    """Base of every schema. `summary` is optional everywhere: a producer may say in words what
    happened; when it does not, the printer derives a line from the fields."""

    KIND: ClassVar[str] = ""
    summary: str | None = None
