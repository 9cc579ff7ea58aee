"""Many instances of a frozen, slotted dataclass at once, column by column.

A frozen dataclass's generated __init__ sets each field through object.__setattr__ (to get past
its own __setattr__, which refuses): for a fast job log (one Event and one LogLine per line) that
was the largest cost of a line after JSON encoding. Here each slot is filled through its member
descriptor from C-level `map` loops, which is the same assignment __init__ makes without the
Python-level call per field. The instances are indistinguishable from constructed ones (equal,
same repr, still frozen afterwards).

Only for classes whose __init__ does nothing but store its fields (no __post_init__, no
InitVar): `build` checks that every field is given, so no instance is left with an unset slot.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from itertools import repeat
from typing import Any, TypeVar

T = TypeVar("T")

_consume = deque[object](maxlen=0).extend
_new = object.__new__
_CHECKED: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> frozenset[str]:
    names = _CHECKED.get(cls)
    if names is None:
        params = getattr(cls, "__dataclass_params__", None)
        if params is None or not params.frozen or "__slots__" not in cls.__dict__ \
                or hasattr(cls, "__post_init__"):
            raise TypeError(f"{cls.__name__} is not a frozen, slotted dataclass without "
                            "__post_init__")
        names = frozenset(f.name for f in dataclasses.fields(cls))
        _CHECKED[cls] = names
    return names


def build(cls: type[T], n: int, columns: dict[str, Iterable[Any]]) -> list[T]:
    """n instances of cls; columns maps every field name to an iterable of at least n values
    (itertools.repeat(x) for a value they all share)."""
    names = _field_names(cls)
    if columns.keys() != names:
        raise TypeError(f"{cls.__name__}: fields {sorted(names)} expected, "
                        f"got {sorted(columns)}")
    objs = list(map(_new, repeat(cls, n)))
    for name, values in columns.items():
        setter = getattr(cls, name).__set__  # the slot's member descriptor
        _consume(map(setter, objs, values))
    if objs:  # map stops at the shortest input: a short column leaves the last one unset
        last = objs[-1]
        for name in names:
            try:
                getattr(last, name)
            except AttributeError:
                raise ValueError(f"{cls.__name__}: fewer than {n} values for {name}") from None
    return objs
